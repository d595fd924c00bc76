// Helpers for the sparse-data tests: temporary files (plain and gzip) and reading a whole share back.
#pragma once

#include <zlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/temp_dir.hpp"
#include "ringtrain/core/csr_batch.hpp"
#include "ringtrain/data/sparse_reader.hpp"

namespace sparse_test {

namespace fs = std::filesystem;
using rt_test::TempDir;

inline void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

inline void write_gz(const std::string& path, const std::string& text) {
    gzFile g = gzopen(path.c_str(), "wb1");
    gzwrite(g, text.data(), static_cast<unsigned>(text.size()));
    gzclose(g);
}

// A row as text ("label|i:v i:v"), to compare rows across readers.
inline std::string row_text(const ringtrain::CsrBatch& b, int64_t r) {
    std::ostringstream s;
    s << b.labels[static_cast<size_t>(r)] << "|";
    const auto idx = b.row_indices(r);
    const auto val = b.row_values(r);
    for (size_t k = 0; k < idx.size(); ++k) s << idx[k] << ":" << val[k] << " ";
    return s.str();
}

// Every row of one epoch of `reader`, in the order it hands them out, in batches of `batch` rows.
inline std::vector<std::string> read_epoch(ringtrain::data::SparseBatchReader& reader, int64_t epoch,
                                           int64_t batch = 7) {
    std::vector<std::string> rows;
    reader.start_epoch(epoch);
    ringtrain::CsrBatch b;
    while (reader.next(b, batch))
        for (int64_t r = 0; r < b.rows(); ++r) rows.push_back(row_text(b, r));
    return rows;
}

}  // namespace sparse_test

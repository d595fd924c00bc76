// One pass over a share for `num_features: 0` and row counts (see sparse_reader.hpp).
#include <algorithm>

#include "ringtrain/data/sparse_line_parser.hpp"
#include "ringtrain/data/sparse_reader.hpp"
#include "sparse_chunk_parse.hpp"

namespace ringtrain::data {

SparseShareScan scan_sparse_share(const SparseReaderOptions& options) {
    const auto source = open_share_source(options);
    const auto parser = make_sparse_line_parser(options);
    SparseShareScan scan;
    TextChunk chunk;
    CsrBatch rows;
    while (source->next(chunk)) {
        rows.clear();
        scan.rows += parse_chunk(chunk, *parser, *source, options.file, rows);
        scan.bytes += static_cast<int64_t>(chunk.text.size());
        for (const uint32_t i : rows.indices) scan.max_index = std::max<int64_t>(scan.max_index, i);
        for (const float y : rows.labels) scan.max_label = std::max<int64_t>(scan.max_label, static_cast<int64_t>(y));
    }
    return scan;
}

int64_t sparse_num_features_for(int64_t max_index) {
    constexpr int64_t kRound = 1024;
    return std::max<int64_t>(kRound, (max_index + 1 + kRound - 1) / kRound * kRound);
}

}  // namespace ringtrain::data

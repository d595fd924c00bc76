#include "sparse_text_source.hpp"

#include <cerrno>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "sparse_text_source_impl.hpp"

namespace ringtrain::data {

std::unique_ptr<SparseTextSource> open_sparse_text_source(const std::string& path, int rank, int world,
                                                          int64_t chunk_bytes) {
    if (world < 1 || rank < 0 || rank >= world)
        throw InputError(path + ": rank " + std::to_string(rank) + " is not in a world of " + std::to_string(world));
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw InputError(path + ": cannot open (" + std::strerror(errno) + "); check data.train_file / data.test_file");
    unsigned char magic[2] = {0, 0};
    const size_t got = std::fread(magic, 1, 2, f);
    if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        std::fclose(f);
        return std::make_unique<GzipShareSource>(path, rank, world, chunk_bytes);
    }
    return std::make_unique<PlainShareSource>(path, f, rank, world, chunk_bytes);
}

int64_t sparse_line_number_at(const std::string& path, int64_t offset) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return -1;
    std::vector<char> block(1 << 20);
    int64_t left = offset, count = 0;
    while (left > 0) {
        const size_t got = std::fread(block.data(), 1, static_cast<size_t>(std::min<int64_t>(left, 1 << 20)), f);
        if (got == 0) break;
        count += std::count(block.data(), block.data() + got, '\n');
        left -= static_cast<int64_t>(got);
    }
    std::fclose(f);
    return count + 1;
}

void throw_line_too_long(const std::string& path, int64_t line, int64_t chunk_bytes) {
    throw InputError(path + ":" + std::to_string(line) + ": line longer than the read buffer (" +
                     std::to_string(chunk_bytes) + " bytes); is this a text file? (the buffer is a quarter of the " +
                     "reader's buffer_bytes)");
}

}  // namespace ringtrain::data

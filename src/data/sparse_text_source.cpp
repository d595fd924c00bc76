#include "sparse_text_source.hpp"

#include <cerrno>
#include <cstring>

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

void throw_line_too_long(const std::string& path, int64_t line, int64_t chunk_bytes) {
    throw InputError(path + ":" + std::to_string(line) + ": line longer than the read buffer (" +
                     std::to_string(chunk_bytes) + " bytes); is this a text file? (the buffer is a quarter of the " +
                     "reader's buffer_bytes)");
}

}  // namespace ringtrain::data

#include "sparse_chunk_parse.hpp"

#include <cstring>

namespace ringtrain::data {

int64_t parse_chunk(const TextChunk& chunk, const SparseLineParser& parser, SparseTextSource& source,
                    const std::string& path, CsrBatch& out) {
    return parse_lines(chunk.text, parser, out, [&](int64_t k, int64_t, const SparseLineError& e) {
        throw InputError(path + ":" + std::to_string(source.file_line(chunk.first_line + k * chunk.line_stride)) +
                         ": " + e.what());
    });
}

std::unique_ptr<SparseTextSource> open_share_source(const SparseReaderOptions& options) {
    if (options.buffer_bytes < kSparseMinBufferBytes)
        throw InputError(options.file + ": the read buffer must be at least " + std::to_string(kSparseMinBufferBytes) +
                         " bytes (got " + std::to_string(options.buffer_bytes) + ")");
    return open_sparse_text_source(options.file, options.rank, options.world, options.buffer_bytes / kSparseQueueBlocks);
}

}  // namespace ringtrain::data

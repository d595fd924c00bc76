#include "sparse_chunk_parse.hpp"

#include <cstring>

namespace ringtrain::data {

int64_t parse_chunk(const TextChunk& chunk, const SparseLineParser& parser, SparseTextSource& source,
                    const std::string& path, CsrBatch& out) {
    const char* p = chunk.text.data();
    const char* end = p + chunk.text.size();
    const int64_t rows_before = out.rows();
    for (int64_t k = 0; p < end; ++k) {
        const auto* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
        const char* line_end = nl ? nl : end;
        try {
            parser.parse(std::string_view(p, static_cast<size_t>(line_end - p)), out);
        } catch (const SparseLineError& e) {
            throw InputError(path + ":" + std::to_string(source.file_line(chunk.first_line + k * chunk.line_stride)) +
                             ": " + e.what());
        }
        p = nl ? nl + 1 : end;
    }
    return out.rows() - rows_before;
}

std::unique_ptr<SparseTextSource> open_share_source(const SparseReaderOptions& options) {
    if (options.buffer_bytes < kSparseMinBufferBytes)
        throw InputError(options.file + ": the read buffer must be at least " + std::to_string(kSparseMinBufferBytes) +
                         " bytes (got " + std::to_string(options.buffer_bytes) + ")");
    return open_sparse_text_source(options.file, options.rank, options.world, options.buffer_bytes / kSparseQueueBlocks);
}

}  // namespace ringtrain::data

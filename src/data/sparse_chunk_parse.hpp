// Parses a chunk of whole lines into CSR rows, turning a line's SparseLineError into an InputError that names
// the file and the line's true line number.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "ringtrain/core/csr_batch.hpp"
#include "ringtrain/data/sparse_line_parser.hpp"
#include "ringtrain/data/sparse_reader.hpp"
#include "sparse_text_source.hpp"

namespace ringtrain::data {

// Parses each line of `text` (whole lines, the last without '\n' possibly) into `out`; returns the rows appended. A
// line's SparseLineError goes to `on_error(k, line_offset, error)` (the k-th line, starting at byte line_offset of
// text), which throws what names the line; one loop for the text source's chunks and the peer board's pieces.
template <class OnError>
int64_t parse_lines(std::string_view text, const SparseLineParser& parser, CsrBatch& out, OnError&& on_error) {
    const char* p = text.data();
    const char* const end = p + text.size();
    const int64_t rows_before = out.rows();
    for (int64_t k = 0; p < end; ++k) {
        const auto* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
        const char* line_end = nl ? nl : end;
        try {
            parser.parse(std::string_view(p, static_cast<size_t>(line_end - p)), out);
        } catch (const SparseLineError& e) {
            on_error(k, static_cast<int64_t>(p - text.data()), e);
        }
        p = nl ? nl + 1 : end;
    }
    return out.rows() - rows_before;
}

// Appends the chunk's rows to `out`; returns the number of rows appended.
int64_t parse_chunk(const TextChunk& chunk, const SparseLineParser& parser, SparseTextSource& source,
                    const std::string& path, CsrBatch& out);

// The share options.rank of options.file, read in blocks of buffer_bytes / kSparseQueueBlocks (which also bound a
// line's length). InputError when buffer_bytes is below kSparseMinBufferBytes or the file cannot be opened.
std::unique_ptr<SparseTextSource> open_share_source(const SparseReaderOptions& options);

}  // namespace ringtrain::data

// Parses a chunk of whole lines into CSR rows, turning a line's SparseLineError into an InputError that names
// the file and the line's true line number.
#pragma once

#include <memory>
#include <string>

#include "ringtrain/core/csr_batch.hpp"
#include "ringtrain/data/sparse_line_parser.hpp"
#include "ringtrain/data/sparse_reader.hpp"
#include "sparse_text_source.hpp"

namespace ringtrain::data {

// Appends the chunk's rows to `out`; returns the number of rows appended.
int64_t parse_chunk(const TextChunk& chunk, const SparseLineParser& parser, SparseTextSource& source,
                    const std::string& path, CsrBatch& out);

// The share options.rank of options.file, read in blocks of buffer_bytes / kSparseQueueBlocks (which also bound a
// line's length). InputError when buffer_bytes is below kSparseMinBufferBytes or the file cannot be opened.
std::unique_ptr<SparseTextSource> open_share_source(const SparseReaderOptions& options);

}  // namespace ringtrain::data

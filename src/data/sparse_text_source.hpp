// One rank's share of a sparse text file, handed out as chunks of whole lines in a bounded buffer.
//   plain file: bytes [size*rank/world, size*(rank+1)/world); a line belongs to the rank whose range holds its
//               first byte, so shares are contiguous, disjoint and cover every line. Each rank reads only its
//               range (plus the end of its last line).
//   .gz file (gzip magic bytes): every rank decompresses the whole stream and keeps physical lines i (0-based,
//               comments and empty lines included) with i % world == rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ringtrain::data {

struct TextChunk {
    // Whole lines, each ending in '\n' except possibly the file's last line; valid until the source's next call
    // (a plain file's lines are a view of its read buffer: no copy a chunk).
    std::string_view text;
    std::string storage;     // the lines, where a source gathers them (a .gz share keeps every world-th line)
    int64_t first_line = 0;  // share-relative number of the first line (see SparseTextSource::file_line)
    int64_t line_stride = 1; // the k-th line of the chunk is share line first_line + k * line_stride
};

class SparseTextSource {
public:
    virtual ~SparseTextSource() = default;
    // Back to the start of the share.
    virtual void rewind() = 0;
    // Replaces chunk with the next lines of the share, at most chunk_bytes of text; false at the end of the share.
    // With target_bytes, it stops at the first line end past target_bytes instead (at least one whole line): the
    // reader parsing on the training thread asks for about one batch, so every step parses about the same.
    virtual bool next(TextChunk& chunk, int64_t target_bytes) = 0;
    bool next(TextChunk& chunk) { return next(chunk, kWholeChunk); }
    static constexpr int64_t kWholeChunk = INT64_MAX;
    // The 1-based line number in the file of share line `share_line` (exact; for plain files it counts the
    // newlines before the share once, on the first call: only error messages need it).
    virtual int64_t file_line(int64_t share_line) = 0;
    // Raw text held now at most (read buffer and chunk), for SparseReaderStats.
    virtual int64_t peak_raw_bytes() const = 0;
    virtual std::string describe_share() const = 0;
    // A plain file's share as the byte range its lines start in, [begin, end); false for a .gz share.
    virtual bool byte_range(int64_t& begin, int64_t& end) const { return false; }
};

// The 1-based number of the line starting at byte `offset` of `path` (reads the file up to it: error paths only);
// -1 when the file cannot be opened.
int64_t sparse_line_number_at(const std::string& path, int64_t offset);

// Opens `path` (gzip or plain, by its first two bytes). Throws InputError when it cannot be opened.
// chunk_bytes also bounds a line's length (a longer line is an InputError naming file and line).
std::unique_ptr<SparseTextSource> open_sparse_text_source(const std::string& path, int rank, int world,
                                                          int64_t chunk_bytes);

}  // namespace ringtrain::data

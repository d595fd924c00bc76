// The two kinds of share behind open_sparse_text_source (see sparse_text_source.hpp).
#pragma once

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <zlib.h>

#include "ringtrain/core/host_memory.hpp"
#include "sparse_text_source.hpp"

namespace ringtrain::data {

// Both kinds of share fail the same way on a line that does not fit their read buffer (a binary file, usually).
[[noreturn]] void throw_line_too_long(const std::string& path, int64_t line, int64_t chunk_bytes);

// A contiguous byte range of a plain file, split at line starts.
class PlainShareSource final : public SparseTextSource {
public:
    PlainShareSource(std::string path, std::FILE* file, int rank, int world, int64_t chunk_bytes);
    ~PlainShareSource() override;
    void rewind() override;
    bool next(TextChunk& chunk, int64_t target_bytes) override;
    int64_t file_line(int64_t share_line) override;
    int64_t peak_raw_bytes() const override { return peak_raw_; }
    std::string describe_share() const override;
    bool byte_range(int64_t& begin, int64_t& end) const override {
        begin = begin_;
        end = std::max(begin_, end_);
        return true;
    }

private:
    bool read_block();  // the next lines of the share into buf_, at most chunk_bytes_ of text
    int64_t read_at_most(char* dst, int64_t n);
    int64_t first_line_start_at_or_after(int64_t offset);
    [[noreturn]] void line_too_long(int64_t share_line);

    std::string path_;
    std::FILE* file_;
    int64_t chunk_bytes_;
    int64_t size_ = 0, begin_ = 0, end_ = 0;  // share: lines starting in [begin_, end_)
    int64_t pos_ = 0;                         // next byte to read
    // The read buffer (chunk_bytes_, a huge-page block, written only by reads: no zero fill): whole lines
    // [0, lines_end_) handed out as views from block_pos_, then [lines_end_, filled_) the start of the next line.
    std::unique_ptr<char, void (*)(void*)> buf_{nullptr, free_huge_page_block};
    int64_t filled_ = 0, lines_end_ = 0, block_pos_ = 0;
    int64_t lines_done_ = 0;                  // share lines handed out so far
    bool done_ = false;
    int64_t lines_before_ = -1;               // newlines before begin_ (counted on demand)
    int64_t peak_raw_ = 0;
};

// Every rank decompresses the whole stream and keeps lines i % world == rank.
class GzipShareSource final : public SparseTextSource {
public:
    GzipShareSource(std::string path, int rank, int world, int64_t chunk_bytes);
    ~GzipShareSource() override;
    void rewind() override;
    bool next(TextChunk& chunk, int64_t target_bytes) override;
    int64_t file_line(int64_t share_line) override { return share_line + 1; }
    int64_t peak_raw_bytes() const override { return peak_raw_; }
    std::string describe_share() const override;

private:
    bool fill();  // reads more decompressed bytes after tail_; false at the end of the stream

    std::string path_;
    int rank_, world_;
    int64_t chunk_bytes_;
    gzFile gz_ = nullptr;
    std::vector<char> buf_;
    int64_t head_ = 0, tail_ = 0;  // unconsumed bytes [head_, tail_) of buf_
    bool eof_ = false;
    int64_t line_ = 0;             // file line (0-based) starting at head_
    int64_t peak_raw_ = 0;
};

}  // namespace ringtrain::data

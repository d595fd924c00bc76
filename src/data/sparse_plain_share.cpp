// A plain file's share: the lines whose first byte lies in [size*rank/world, size*(rank+1)/world).
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ringtrain/core/error.hpp"
#include "sparse_text_source_impl.hpp"

namespace ringtrain::data {

namespace {

int64_t count_newlines(const char* p, int64_t n) {
    int64_t count = 0;
    const char* end = p + n;
    while (const void* q = std::memchr(p, '\n', static_cast<size_t>(end - p))) {
        ++count;
        p = static_cast<const char*>(q) + 1;
    }
    return count;
}

}  // namespace

PlainShareSource::PlainShareSource(std::string path, std::FILE* file, int rank, int world, int64_t chunk_bytes)
    : path_(std::move(path)), file_(file), chunk_bytes_(chunk_bytes) {
    if (fseeko(file_, 0, SEEK_END) != 0 || (size_ = ftello(file_)) < 0)
        throw InputError(path_ + ": cannot seek (" + std::strerror(errno) + "); pass a regular file");
    const int64_t raw_begin = size_ * rank / world, raw_end = size_ * (rank + 1) / world;
    begin_ = first_line_start_at_or_after(raw_begin);
    end_ = raw_end;
    buf_.reset(static_cast<char*>(allocate_huge_page_block(static_cast<size_t>(chunk_bytes_))));
    rewind();
}

PlainShareSource::~PlainShareSource() { std::fclose(file_); }

int64_t PlainShareSource::read_at_most(char* dst, int64_t n) {
    const size_t got = std::fread(dst, 1, static_cast<size_t>(n), file_);
    if (got < static_cast<size_t>(n) && std::ferror(file_))
        throw InputError(path_ + ": read error (" + std::strerror(errno) + ")");
    return static_cast<int64_t>(got);
}

// A line starts at 0 and after every '\n': the first such offset >= `offset` (size_ when there is none).
int64_t PlainShareSource::first_line_start_at_or_after(int64_t offset) {
    if (offset == 0) return 0;
    if (fseeko(file_, offset - 1, SEEK_SET) != 0) throw InputError(path_ + ": cannot seek");
    std::vector<char> block(64 << 10);
    for (int64_t at = offset - 1;;) {
        const int64_t got = read_at_most(block.data(), static_cast<int64_t>(block.size()));
        if (got == 0) return size_;
        if (const void* q = std::memchr(block.data(), '\n', static_cast<size_t>(got)))
            return at + (static_cast<const char*>(q) - block.data()) + 1;
        at += got;
    }
}

void PlainShareSource::rewind() {
    pos_ = begin_;
    filled_ = lines_end_ = block_pos_ = 0;
    lines_done_ = 0;
    done_ = begin_ >= end_;
    if (!done_ && fseeko(file_, pos_, SEEK_SET) != 0) throw InputError(path_ + ": cannot seek");
}

void PlainShareSource::line_too_long(int64_t share_line) {
    throw_line_too_long(path_, file_line(share_line), chunk_bytes_);
}

bool PlainShareSource::next(TextChunk& chunk, int64_t target_bytes) {
    if (block_pos_ >= lines_end_ && !read_block()) return false;
    // Whole lines of the block: up to the first line end at or past target_bytes.
    char* const buf = buf_.get();
    const int64_t start = block_pos_;
    int64_t end = lines_end_;
    if (target_bytes < end - start) {
        const int64_t from = start + std::max<int64_t>(target_bytes, 1) - 1;
        if (const void* nl = std::memchr(buf + from, '\n', static_cast<size_t>(end - from)))
            end = static_cast<const char*>(nl) - buf + 1;
    }
    block_pos_ = end;
    chunk.text = std::string_view(buf + start, static_cast<size_t>(end - start));
    chunk.first_line = lines_done_;
    chunk.line_stride = 1;
    lines_done_ += count_newlines(chunk.text.data(), end - start) + (chunk.text.back() == '\n' ? 0 : 1);
    return true;
}

// Called only once the block's lines are all handed out, so lines_done_ is also the share line being read (for
// line_too_long's message), with no count of its own.
bool PlainShareSource::read_block() {
    char* const buf = buf_.get();
    // The start of a line read past the last '\n' moves to the front.
    std::memmove(buf, buf + lines_end_, static_cast<size_t>(filled_ - lines_end_));
    filled_ -= lines_end_;
    lines_end_ = block_pos_ = 0;
    if (done_ && filled_ == 0) return false;
    // Read whole lines while inside the range; past its end, only the rest of the last line started inside it.
    while (!done_) {
        if (pos_ < end_) {
            const int64_t want = std::min(chunk_bytes_ - filled_, end_ - pos_);
            if (want <= 0) line_too_long(lines_done_);
            const int64_t got = read_at_most(buf + filled_, want);
            filled_ += got;
            pos_ += got;
            peak_raw_ = std::max(peak_raw_, filled_);
            if (got < want) {  // the file shrank under us: what is there is the last line
                done_ = true;
                break;
            }
            const void* last_nl = memrchr(buf, '\n', static_cast<size_t>(filled_));
            if (last_nl == nullptr) continue;  // one partial line so far
            lines_end_ = static_cast<const char*>(last_nl) - buf + 1;
            if (pos_ >= end_ && lines_end_ == filled_) done_ = true;  // the range ends exactly at a line start
            return true;
        }
        // Past the range: finish the line that started inside it.
        if (filled_ == 0) {
            done_ = true;
            break;
        }
        const int64_t want = std::min<int64_t>(chunk_bytes_ - filled_, 64 << 10);
        if (want <= 0) line_too_long(lines_done_);
        const int64_t old = filled_;
        const int64_t got = read_at_most(buf + filled_, want);
        filled_ += got;
        pos_ += got;
        peak_raw_ = std::max(peak_raw_, filled_);
        if (got == 0) {  // end of file: the last line has no '\n'
            done_ = true;
            break;
        }
        if (const void* nl = std::memchr(buf + old, '\n', static_cast<size_t>(got))) {
            filled_ = static_cast<const char*>(nl) - buf + 1;
            done_ = true;
            break;
        }
    }
    lines_end_ = filled_;  // done: what the buffer holds is the share's last lines
    return filled_ > 0;
}

int64_t PlainShareSource::file_line(int64_t share_line) {
    // Only on the error path: the newlines before the share, counted once.
    if (lines_before_ < 0) {
        const int64_t first = sparse_line_number_at(path_, begin_);
        if (first < 0) return -1;
        lines_before_ = first - 1;
    }
    return lines_before_ + share_line + 1;
}

std::string PlainShareSource::describe_share() const {
    return "bytes [" + std::to_string(begin_) + ", " + std::to_string(std::max(begin_, end_)) + ") of " +
           std::to_string(size_);
}

}  // namespace ringtrain::data

// A .gz file's share: every rank decompresses the whole stream (gzip cannot be entered in the middle) and keeps
// lines i % world == rank, so the shares are balanced to one line without a counting pass.
#include <cstring>

#include "ringtrain/core/error.hpp"
#include "sparse_text_source_impl.hpp"

namespace ringtrain::data {

GzipShareSource::GzipShareSource(std::string path, int rank, int world, int64_t chunk_bytes)
    : path_(std::move(path)), rank_(rank), world_(world), chunk_bytes_(chunk_bytes),
      buf_(static_cast<size_t>(chunk_bytes)) {
    rewind();
}

GzipShareSource::~GzipShareSource() {
    if (gz_) gzclose(gz_);
}

void GzipShareSource::rewind() {
    if (gz_) gzclose(gz_);
    gz_ = gzopen(path_.c_str(), "rb");
    if (!gz_) throw InputError(path_ + ": cannot open as gzip");
    gzbuffer(gz_, 1 << 17);
    head_ = tail_ = 0;
    eof_ = false;
    line_ = 0;
}

bool GzipShareSource::fill() {
    if (eof_) return false;
    if (head_ > 0) {  // keep the partial line at the front
        std::memmove(buf_.data(), buf_.data() + head_, static_cast<size_t>(tail_ - head_));
        tail_ -= head_;
        head_ = 0;
    }
    const auto room = static_cast<int64_t>(buf_.size()) - tail_;
    if (room == 0)
        throw_line_too_long(path_, line_ + 1, chunk_bytes_);
    const int got = gzread(gz_, buf_.data() + tail_, static_cast<unsigned>(room));
    if (got < 0 || (got == 0 && !gzeof(gz_))) {
        int code = 0;
        const char* msg = gzerror(gz_, &code);
        throw InputError(path_ + ":" + std::to_string(line_ + 1) + ": corrupt or truncated gzip data (" +
                         (msg ? msg : "unknown zlib error") + "); check the download or re-compress the file");
    }
    if (got == 0) {
        // gzread stops quietly at a stream cut short; zlib reports it as Z_BUF_ERROR.
        int code = 0;
        gzerror(gz_, &code);
        if (code == Z_BUF_ERROR)
            throw InputError(path_ + ":" + std::to_string(line_ + 1) +
                             ": truncated gzip data (the file ends inside the compressed stream); check the download");
        eof_ = true;
        return false;
    }
    tail_ += got;
    return true;
}

bool GzipShareSource::next(TextChunk& chunk, int64_t target_bytes) {
    std::string& text = chunk.storage;
    text.clear();
    chunk.first_line = -1;
    chunk.line_stride = world_;
    text.reserve(static_cast<size_t>(chunk_bytes_));  // exactly one chunk: the bound peak_raw_bytes states
    for (;;) {
        if (head_ == tail_ && !fill()) break;
        const char* start = buf_.data() + head_;
        const void* nl = std::memchr(start, '\n', static_cast<size_t>(tail_ - head_));
        if (!nl && fill()) continue;  // a partial line: read more (fill() keeps it at the front)
        start = buf_.data() + head_;
        nl = std::memchr(start, '\n', static_cast<size_t>(tail_ - head_));
        const int64_t len = nl ? static_cast<const char*>(nl) - start + 1 : tail_ - head_;  // last line: no '\n'
        if (len == 0) break;
        if (line_ % world_ == rank_) {
            const int64_t limit = std::min(chunk_bytes_, target_bytes);
            if (!text.empty() && static_cast<int64_t>(text.size()) + len > limit) break;  // next chunk's
            if (chunk.first_line < 0) chunk.first_line = line_;
            text.append(start, static_cast<size_t>(len));
        }
        head_ += len;
        ++line_;
        peak_raw_ = std::max<int64_t>(peak_raw_, static_cast<int64_t>(buf_.size() + text.capacity()));
    }
    chunk.text = text;
    return !text.empty();
}

std::string GzipShareSource::describe_share() const {
    return "gzip lines i % " + std::to_string(world_) + " == " + std::to_string(rank_);
}

}  // namespace ringtrain::data

#include "ringtrain/data/sparse_peer_board.hpp"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ringtrain/core/cpu_relax.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/sparse_line_parser.hpp"
#include "sparse_chunk_parse.hpp"
#include "sparse_text_source.hpp"

namespace ringtrain::data {

namespace {

enum State : uint64_t { Empty = 0, Busy = 1, Ready = 2, Failed = 3, Mine = 4 };
constexpr uint64_t kClosed = ~uint64_t{0};  // a header's window while its owner starts a pass
// Room for a piece of lines of 4+ bytes with a feature every 2 bytes (~35 rows and ~1,000 features are usual); a
// piece whose rows do not fit (very short lines, or a last line running far past the piece) is parsed by its owner.
constexpr int64_t kRowCap = kSparsePieceBytes / 4;
constexpr int64_t kNnzCap = kSparsePieceBytes / 2;
constexpr size_t kLine = 128;  // two cache lines: no false sharing with the adjacent-line prefetcher
constexpr size_t round_up(size_t n) { return (n + kLine - 1) / kLine * kLine; }
constexpr size_t kPayloadBytes = round_up(4 * static_cast<size_t>((kRowCap + 1) + kRowCap + 2 * kNnzCap));

inline uint64_t word(uint64_t generation, State s) { return (generation << 3) | s; }

// Waits a little: spins first (a helper finishes a piece in tens of microseconds), then yields the core (a helper
// that shares it, more ranks than cores, must get to run).
void backoff(int& round) {
    if (++round < 200) {
        cpu_relax();
    } else {
        sched_yield();
    }
}

static_assert(std::atomic<uint64_t>::is_always_lock_free, "the board's words must be lock-free to work across processes");

}  // namespace

struct SparsePeerBoard::Header {
    std::atomic<uint64_t> published;  // 1 once begin/end/pieces are written
    int64_t begin, end, pieces;
    alignas(64) std::atomic<uint64_t> window;  // generation of the next piece the owner takes (kClosed: none)
};

struct SparsePeerBoard::Slot {
    std::atomic<uint64_t> word;
    int32_t rows, nnz;
};

namespace {
constexpr size_t kHeaderBytes = round_up(sizeof(std::atomic<uint64_t>) * 2 + 3 * sizeof(int64_t) + 64);
constexpr size_t kSlotBytes = round_up(64) + kPayloadBytes;
constexpr size_t kRankBytes = kHeaderBytes + SparsePeerBoard::kSlots * kSlotBytes;
}  // namespace

size_t sparse_peer_board_bytes(int ranks) { return static_cast<size_t>(std::max(ranks, 1)) * kRankBytes; }

SparsePeerBoard::SparsePeerBoard(void* base, size_t bytes, int ranks, int me)
    : base_(static_cast<char*>(base)), ranks_(ranks), me_(me) {
    static_assert(sizeof(Header) <= kHeaderBytes && sizeof(Slot) <= 64);
    if (ranks < 1 || me < 0 || me >= ranks || bytes < sparse_peer_board_bytes(ranks))
        throw Error("SparsePeerBoard: " + std::to_string(bytes) + " bytes for " + std::to_string(ranks) +
                    " ranks (needs " + std::to_string(sparse_peer_board_bytes(ranks)) + "), rank " + std::to_string(me));
}

SparsePeerBoard::Header& SparsePeerBoard::header(int r) const {
    return *reinterpret_cast<Header*>(base_ + static_cast<size_t>(r) * kRankBytes);
}

SparsePeerBoard::Slot& SparsePeerBoard::slot(int r, int64_t k) const {
    return *reinterpret_cast<Slot*>(base_ + static_cast<size_t>(r) * kRankBytes + kHeaderBytes +
                                    static_cast<size_t>(k % kSlots) * kSlotBytes);
}

float* SparsePeerBoard::slot_payload(int r, int64_t k) const {
    return reinterpret_cast<float*>(reinterpret_cast<char*>(&slot(r, k)) + round_up(64));
}

void SparsePeerBoard::publish_share(int64_t begin, int64_t end) {
    Header& h = header(me_);
    h.begin = begin;
    h.end = end;
    h.pieces = end > begin ? (end - begin + kSparsePieceBytes - 1) / kSparsePieceBytes : 0;
    h.window.store(kClosed, std::memory_order_relaxed);
    h.published.store(1, std::memory_order_release);
}

int64_t SparsePeerBoard::pieces() const { return header(me_).pieces; }
int64_t SparsePeerBoard::share_begin() const { return header(me_).begin; }
int64_t SparsePeerBoard::share_end() const { return header(me_).end; }

void SparsePeerBoard::start_pass() {
    Header& h = header(me_);
    h.window.store(kClosed, std::memory_order_release);  // no new claims on this rank's slots
    ++pass_;
    for (int64_t i = 0; i < kSlots; ++i) {
        std::atomic<uint64_t>& w = slot(me_, i).word;
        for (int round = 0;;) {
            uint64_t seen = w.load(std::memory_order_acquire);
            if ((seen & 7) == Busy) {  // a helper that claimed a piece of the last pass: let it finish
                backoff(round);
                continue;
            }
            if (w.compare_exchange_weak(seen, word(generation(i), Empty), std::memory_order_acq_rel)) break;
        }
    }
    h.window.store(generation(0), std::memory_order_release);
}

bool SparsePeerBoard::take(int64_t k, CsrBatch& out) {
    Slot& s = slot(me_, k);
    const uint64_t gen = generation(k);
    for (int round = 0;;) {
        uint64_t seen = s.word.load(std::memory_order_acquire);
        if (seen == word(gen, Ready)) break;
        if (seen == word(gen, Empty) || seen == word(gen, Failed)) {
            if (s.word.compare_exchange_strong(seen, word(gen, Mine), std::memory_order_acq_rel)) return false;
            continue;  // a helper claimed it just now
        }
        if (seen == word(gen, Busy)) {
            backoff(round);
            continue;
        }
        throw Error("peer parsing: piece " + std::to_string(k) + "'s slot holds state " + std::to_string(seen & 7) +
                    " of generation " + std::to_string(seen >> 3) + ", not " + std::to_string(gen));
    }
    const int64_t rows = s.rows, nnz = s.nnz;
    const auto* offsets = reinterpret_cast<const int32_t*>(slot_payload(me_, k));
    const float* labels = reinterpret_cast<const float*>(offsets + kRowCap + 1);
    const auto* indices = reinterpret_cast<const uint32_t*>(labels + kRowCap);
    const float* values = reinterpret_cast<const float*>(indices + kNnzCap);
    const int64_t base = out.offsets.back();
    out.indices.insert(out.indices.end(), indices, indices + nnz);
    out.values.insert(out.values.end(), values, values + nnz);
    out.labels.insert(out.labels.end(), labels, labels + rows);
    for (int64_t r = 1; r <= rows; ++r) out.offsets.push_back(base + offsets[r]);
    finish_own(k);
    return true;
}

bool SparsePeerBoard::claim_own(int64_t k) {
    Slot& s = slot(me_, k);
    const uint64_t gen = generation(k);
    uint64_t seen = s.word.load(std::memory_order_acquire);
    if (seen != word(gen, Empty) && seen != word(gen, Failed)) return false;  // a helper's: take() collects it
    return s.word.compare_exchange_strong(seen, word(gen, Mine), std::memory_order_acq_rel);
}

void SparsePeerBoard::finish_own(int64_t k) {
    // The slot is Mine or a consumed Ready: no helper can claim it until it reads Empty for the piece kSlots later.
    slot(me_, k).word.store(word(generation(k + kSlots), Empty), std::memory_order_release);
    header(me_).window.store(generation(k + 1), std::memory_order_release);
}

bool SparsePeerBoard::claim(Claim& c) {
    for (int i = 1; i < ranks_; ++i) {
        const int r = (me_ + i) % ranks_;
        Header& h = header(r);
        if (h.published.load(std::memory_order_acquire) == 0) continue;
        const uint64_t w = h.window.load(std::memory_order_acquire);
        if (w == kClosed) continue;
        const int64_t k0 = static_cast<int64_t>(w & 0xffffffffu);
        const uint64_t pass = w >> 32;
        for (int64_t k = k0; k < std::min(k0 + kSlots, h.pieces); ++k) {
            std::atomic<uint64_t>& sw = slot(r, k).word;
            uint64_t expect = word((pass << 32) | static_cast<uint64_t>(k), Empty);
            if (sw.load(std::memory_order_relaxed) != expect) continue;
            if (!sw.compare_exchange_strong(expect, word((pass << 32) | static_cast<uint64_t>(k), Busy),
                                            std::memory_order_acq_rel))
                continue;
            c = Claim{r, k, h.begin, h.end, (pass << 32) | static_cast<uint64_t>(k)};
            return true;
        }
    }
    return false;
}

bool SparsePeerBoard::fill(const Claim& c, const CsrBatch& rows) {
    if (rows.rows() > kRowCap || rows.nnz() > kNnzCap) {
        fail(c);
        return false;
    }
    Slot& s = slot(c.peer, c.piece);
    auto* offsets = reinterpret_cast<int32_t*>(slot_payload(c.peer, c.piece));
    float* labels = reinterpret_cast<float*>(offsets + kRowCap + 1);
    auto* indices = reinterpret_cast<uint32_t*>(labels + kRowCap);
    float* values = reinterpret_cast<float*>(indices + kNnzCap);
    for (int64_t r = 0; r <= rows.rows(); ++r) offsets[r] = static_cast<int32_t>(rows.offsets[static_cast<size_t>(r)]);
    std::copy(rows.labels.begin(), rows.labels.end(), labels);
    std::copy(rows.indices.begin(), rows.indices.end(), indices);
    std::copy(rows.values.begin(), rows.values.end(), values);
    s.rows = static_cast<int32_t>(rows.rows());
    s.nnz = static_cast<int32_t>(rows.nnz());
    s.word.store(word(c.generation, Ready), std::memory_order_release);  // publishes the rows
    return true;
}

void SparsePeerBoard::fail(const Claim& c) {
    slot(c.peer, c.piece).word.store(word(c.generation, Failed), std::memory_order_release);
}

SparsePieceFile::SparsePieceFile(const std::string& path, int64_t window_bytes)
    : path_(path), window_(std::max<int64_t>(window_bytes, kSparsePieceBytes)) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw InputError(path + ": cannot open (" + std::strerror(errno) + "); check data.train_file");
}

SparsePieceFile::~SparsePieceFile() {
    if (fd_ >= 0) ::close(fd_);
}

std::string_view SparsePieceFile::bytes(int64_t offset, int64_t n) {
    if (offset < buf_offset_ || offset > buf_offset_ + buf_size_ ||
        (offset + n > buf_offset_ + buf_size_ && !buf_ends_file_)) {
        const int64_t want = std::max(n, window_);
        if (want > buf_capacity_) {
            buf_ = std::make_unique_for_overwrite<char[]>(static_cast<size_t>(want));
            buf_capacity_ = want;
        }
        int64_t got = 0;
        while (got < want) {
            const ssize_t r = pread(fd_, buf_.get() + got, static_cast<size_t>(want - got), offset + got);
            if (r < 0) {
                if (errno == EINTR) continue;
                throw InputError(path_ + ": read error (" + std::strerror(errno) + ")");
            }
            if (r == 0) break;
            got += r;
        }
        buf_size_ = got;
        buf_offset_ = offset;
        buf_ends_file_ = got < want;
    }
    const int64_t from = offset - buf_offset_;
    const int64_t len = std::max<int64_t>(0, std::min<int64_t>(n, buf_size_ - from));
    return std::string_view(buf_.get() + from, static_cast<size_t>(len));
}

bool read_sparse_piece(SparsePieceFile& file, int64_t begin, int64_t end, int64_t k, int64_t max_line_bytes,
                       std::string_view& text, int64_t& text_offset) {
    return read_sparse_pieces(file, begin, end, k, k, max_line_bytes, text, text_offset);
}

bool read_sparse_pieces(SparsePieceFile& file, int64_t begin, int64_t end, int64_t k, int64_t k_last,
                        int64_t max_line_bytes, std::string_view& text, int64_t& text_offset) {
    const int64_t a = begin + k * kSparsePieceBytes;
    const int64_t b = std::min(begin + (k_last + 1) * kSparsePieceBytes, end);
    text = {};
    text_offset = a;
    if (a >= b) return true;
    // The first line start at or after a: a itself at the share's start, else one past the first '\n' at or after
    // a - 1 (a line starts after every '\n').
    const int64_t off = a == begin ? a : a - 1;
    int64_t want = b - off + 512;
    std::string_view v = file.bytes(off, want);
    int64_t s = a;
    if (a != begin) {
        const size_t nl = v.substr(0, static_cast<size_t>(std::max<int64_t>(0, b - 1 - off))).find('\n');
        if (nl == std::string_view::npos) return true;  // no line starts in [a, b): a long line runs through the piece
        s = off + static_cast<int64_t>(nl) + 1;
    }
    // The last line starting before b starts one past the last '\n' in [s, b - 1), or at s; it ends one past the first
    // '\n' at or after b - 1 (or at the end of the file). Longer than the bound: false, naming where it starts.
    int64_t last = s;
    if (b - 1 > s) {
        const size_t nl = v.substr(static_cast<size_t>(s - off), static_cast<size_t>(b - 1 - s)).rfind('\n');
        if (nl != std::string_view::npos) last = s + static_cast<int64_t>(nl) + 1;
    }
    int64_t e = -1;
    for (;;) {
        const size_t from = static_cast<size_t>(b - 1 - off);
        if (from < v.size())
            if (const size_t nl = v.find('\n', from); nl != std::string_view::npos) {
                e = off + static_cast<int64_t>(nl) + 1;
                break;
            }
        if (static_cast<int64_t>(v.size()) < want) {  // end of file: the last line has no '\n'
            e = off + static_cast<int64_t>(v.size());
            break;
        }
        if (off + static_cast<int64_t>(v.size()) - last > max_line_bytes) break;
        want *= 2;
        v = file.bytes(off, want);
    }
    if (e < 0 || e - last > max_line_bytes) {
        text_offset = last;
        return false;
    }
    text = v.substr(static_cast<size_t>(s - off), static_cast<size_t>(e - s));
    text_offset = s;
    return true;
}

int64_t parse_sparse_piece(std::string_view text, int64_t text_offset, const SparseLineParser& parser,
                           const std::string& path, CsrBatch& out) {
    return parse_lines(text, parser, out, [&](int64_t, int64_t line_offset, const SparseLineError& e) {
        if (path.empty()) throw e;
        throw InputError(path + ":" + std::to_string(sparse_line_number_at(path, text_offset + line_offset)) + ": " +
                         e.what());
    });
}

}  // namespace ringtrain::data

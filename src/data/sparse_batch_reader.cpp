// The streaming sparse reader: a parse thread turns this rank's share into CSR blocks (a bounded queue of
// kSparseQueueBlocks), next() takes rows from them in file order, through the shuffle buffer when there is one.
// On one CPU (ParseOn::Caller, or Auto under a one-CPU affinity mask) next() parses the next block itself when it
// needs one: the same blocks in the same order, without the thread.
// With cache=true the blocks of a completed pass are kept and later epochs replay them (same rows, same order
// before the shuffle, so a cached epoch equals an uncached one).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include <sched.h>

#include "ringtrain/core/hash.hpp"
#include "ringtrain/data/sparse_line_parser.hpp"
#include "ringtrain/data/sparse_peer_board.hpp"
#include "ringtrain/data/sparse_reader.hpp"
#include "sparse_chunk_parse.hpp"
#include "sparse_shuffle_buffer.hpp"
#include "sparse_text_source.hpp"
#include "sparse_text_source_impl.hpp"

namespace ringtrain::data {

namespace {

int64_t csr_bytes(const CsrBatch& b) {
    return static_cast<int64_t>(b.offsets.size() * sizeof(int64_t) + b.indices.size() * sizeof(uint32_t) +
                                b.values.size() * sizeof(float) + b.labels.size() * sizeof(float));
}

// Appends rows [r0, r1) of `from` to `out`.
void append_rows(const CsrBatch& from, int64_t r0, int64_t r1, CsrBatch& out) {
    const int64_t o0 = from.offsets[static_cast<size_t>(r0)], o1 = from.offsets[static_cast<size_t>(r1)];
    out.indices.insert(out.indices.end(), from.indices.begin() + o0, from.indices.begin() + o1);
    out.values.insert(out.values.end(), from.values.begin() + o0, from.values.begin() + o1);
    out.labels.insert(out.labels.end(), from.labels.begin() + r0, from.labels.begin() + r1);
    const int64_t shift = out.offsets.back() - o0;
    for (int64_t r = r0 + 1; r <= r1; ++r) out.offsets.push_back(from.offsets[static_cast<size_t>(r)] + shift);
}

// The shuffle seed of (seed, rank, epoch): distinct per rank and per epoch, reproducible.
uint64_t shuffle_seed(uint64_t seed, int rank, int64_t epoch) {
    return mix64(mix64(seed ^ 0x5348'5546'464C'4531ULL) + kGoldenGamma * static_cast<uint64_t>(rank + 1)) ^
           mix64(static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ULL + 1);
}

class StreamingSparseReader final : public SparseBatchReader {
public:
    explicit StreamingSparseReader(SparseReaderOptions options)
        : opt_(std::move(options)), parser_(make_sparse_line_parser(opt_)),
          source_(open_share_source(opt_)),
          shuffle_(opt_.shuffle_buffer),
          parse_inline_(opt_.parse_on == SparseReaderOptions::ParseOn::Caller ||
                        (opt_.parse_on == SparseReaderOptions::ParseOn::Auto && sparse_single_cpu())) {
        int64_t begin = 0, end = 0;
        if (opt_.peer_board && parse_inline_ && source_->byte_range(begin, end)) {
            // A window of about two batch-1024 steps' bytes: with one of a whole 2 MiB block, every ~17th step
            // read ~300 us more than the others and the other rank waited for it at the next collective
            // (bench/RESULTS.md, "The owner's read window").
            constexpr int64_t kOwnWindowBytes = 256 << 10;
            own_file_ = std::make_unique<SparsePieceFile>(opt_.file, kOwnWindowBytes);
            board_ = opt_.peer_board;
            board_->publish_share(begin, end);
        }
    }
    ~StreamingSparseReader() override { stop_thread(); }

    void start_epoch(int64_t epoch) override {
        stop_thread();
        queue_.clear();  // rows parsed ahead on this thread (the parse thread's were dropped by stop_thread)
        queued_rows_ = queued_bytes_ = 0;
        started_ = true;
        current_.clear();
        current_row_ = 0;
        cached_block_ = nullptr;
        cache_pos_ = 0;
        exhausted_ = false;
        shuffle_.reset(shuffle_seed(opt_.seed, opt_.rank, epoch));
        if (cache_complete_) return;  // replay the cached blocks
        cache_.clear();
        cached_rows_ = 0;
        source_->rewind();
        if (board_) {
            board_->start_pass();
            next_piece_ = 0;
        }
        finished_ = false;
        stop_ = false;
        error_ = nullptr;
        if (parse_inline_) return;  // take_block parses on demand
        worker_ = std::thread([this] { parse_share(); });
    }

    bool next(CsrBatch& out, int64_t rows) override {
        if (!started_) start_epoch(0);
        out.clear();
        if (opt_.shuffle_buffer == 0) {
            while (out.rows() < rows && (want_rows_ = rows - out.rows(), has_row())) {
                const int64_t take = std::min(rows - out.rows(), block().rows() - current_row_);
                append_rows(block(), current_row_, current_row_ + take, out);
                current_row_ += take;
            }
            return out.rows() > 0;
        }
        while (out.rows() < rows) {
            want_rows_ = rows - out.rows();
            while (!shuffle_.full() && has_row()) shuffle_.push(block(), current_row_++);
            peak_shuffle_rows_ = std::max(peak_shuffle_rows_, shuffle_.size());
            if (shuffle_.size() == 0) break;
            if (has_row()) {
                shuffle_.pop_into(out, &block(), current_row_++);
            } else {
                shuffle_.pop_into(out, nullptr, 0);
            }
        }
        return out.rows() > 0;
    }

    bool parse_ahead(int64_t limit_rows) override {
        if (!parse_inline_ || !started_ || cache_complete_ || finished_ || queued_rows_ >= limit_rows) return false;
        CsrBatch block;
        if (!spare_.empty()) {
            block = std::move(spare_.back());
            spare_.pop_back();
        }
        constexpr int64_t kPieceRows = 32;  // ~10-20 us of parsing between two looks at the collective
        if (!parse_chunk_inline(block, kPieceRows)) return false;
        queued_rows_ += block.rows();
        queued_bytes_ += csr_bytes(block);
        std::lock_guard<std::mutex> lock(mu_);
        stats_.peak_queued_rows = std::max(stats_.peak_queued_rows, queued_rows_);
        stats_.peak_queued_bytes = std::max(stats_.peak_queued_bytes, queued_bytes_);
        queue_.push_back(std::move(block));
        return true;
    }

    bool parses_on_caller() const override { return parse_inline_; }
    bool parses_with_peers() const override { return board_ != nullptr; }

    bool help_peers() override {
        SparsePeerBoard::Claim c;
        if (!board_ || !board_->claim(c)) return false;
        const auto t0 = std::chrono::steady_clock::now();
        int64_t rows = 0;
        try {
            // A window per peer: its pieces come in order, ~16 to a read.
            if (peer_files_.size() < static_cast<size_t>(board_->ranks())) peer_files_.resize(static_cast<size_t>(board_->ranks()));
            auto& file = peer_files_[static_cast<size_t>(c.peer)];
            if (!file) file = std::make_unique<SparsePieceFile>(opt_.file, 16 * kSparsePieceBytes);
            int64_t offset = 0;
            std::string_view text;
            if (read_sparse_piece(*file, c.begin, c.end, c.piece, max_line_bytes(), text, offset)) {
                helped_.clear();
                rows = parse_sparse_piece(text, offset, *parser_, std::string(), helped_);
                if (!board_->fill(c, helped_)) rows = 0;  // too many for the slot: its owner parses them
            } else {
                board_->fail(c);  // a line too long: its owner says so
            }
        } catch (...) {
            board_->fail(c);  // a bad line (or anything else): its owner parses the piece again and names it
            rows = 0;
        }
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::lock_guard<std::mutex> lock(mu_);
        stats_.rows_for_peers += rows;
        stats_.seconds_for_peers += secs;
        return true;
    }

    int64_t num_features() const override { return parser_->num_features(); }

    std::string description() const override {
        return std::string(opt_.format == SparseFormat::Criteo ? "criteo" : "libsvm") + " " + opt_.file + " (rank " +
               std::to_string(opt_.rank) + " of " + std::to_string(opt_.world) + ": " + source_->describe_share() +
               "), " + std::to_string(num_features()) + " features";
    }

    // Called from the thread that calls next().
    SparseReaderStats stats() const override {
        std::lock_guard<std::mutex> lock(mu_);
        SparseReaderStats s = stats_;
        s.peak_shuffle_rows = peak_shuffle_rows_;
        s.cached_rows = cached_rows_;
        return s;
    }

private:
    // The parse thread: chunks of text -> CSR blocks -> the bounded queue.
    void parse_share() {
        try {
            TextChunk chunk;
            for (;;) {
                {
                    std::lock_guard<std::mutex> lock(mu_);
                    if (stop_) break;
                }
                const auto t0 = std::chrono::steady_clock::now();
                if (!source_->next(chunk)) break;
                CsrBatch block = recycled_block();
                const int64_t rows = parse_chunk(chunk, *parser_, *source_, opt_.file, block);
                const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                std::unique_lock<std::mutex> lock(mu_);
                stats_.parse_seconds += secs;
                stats_.rows_parsed += rows;
                stats_.bytes_parsed += static_cast<int64_t>(chunk.text.size());
                stats_.peak_raw_bytes = source_->peak_raw_bytes();  // copied here: the source is this thread's
                if (rows == 0) continue;
                space_.wait(lock, [&] { return stop_ || static_cast<int>(queue_.size()) < kSparseQueueBlocks; });
                if (stop_) return;
                queued_rows_ += rows;
                queued_bytes_ += csr_bytes(block);
                queue_.push_back(std::move(block));
                stats_.peak_queued_rows = std::max(stats_.peak_queued_rows, queued_rows_);
                stats_.peak_queued_bytes = std::max(stats_.peak_queued_bytes, queued_bytes_);
                ready_.notify_one();
            }
        } catch (...) {
            std::lock_guard<std::mutex> lock(mu_);
            error_ = std::current_exception();
        }
        std::lock_guard<std::mutex> lock(mu_);
        finished_ = true;
        ready_.notify_one();
    }

    void stop_thread() {
        if (!worker_.joinable()) return;
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
        }
        space_.notify_all();
        worker_.join();
        std::lock_guard<std::mutex> lock(mu_);
        queue_.clear();
        queued_rows_ = queued_bytes_ = 0;
    }

    const CsrBatch& block() const { return cached_block_ ? *cached_block_ : current_; }

    // Whether a row is left in this epoch; moves to the next block (from the cache or the queue) as needed.
    bool has_row() {
        if (exhausted_) return false;
        while (current_row_ >= block().rows()) {
            current_row_ = 0;
            if (cache_complete_) {
                if (cache_pos_ >= cache_.size()) {
                    exhausted_ = true;
                    return false;
                }
                cached_block_ = &cache_[cache_pos_++];
                continue;
            }
            if (opt_.cache && current_.rows() > 0) {  // keep the block just used
                cached_rows_ += current_.rows();
                cache_.push_back(std::move(current_));
            }
            current_.clear();
            if (!take_block()) {
                if (opt_.cache) cache_complete_ = true;
                exhausted_ = true;
                return false;
            }
        }
        return true;
    }

    // Inline parsing asks for about the rows the batch still needs (at the bytes per row seen so far), not a whole
    // 2 MiB block: a block every ~70 steps made that step ~70 times longer on one rank, and at 2+ ranks the others
    // waited for it at the next collective (sync wait 0.16 ms a 0.3 ms step; bench/RESULTS.md, "Sparse weak
    // scaling: parse per step"). A little over, so that one chunk usually completes the batch.
    // The bytes a row took so far (rounded up), or a Criteo-like guess before the first one.
    int64_t bytes_per_row() const {
        constexpr int64_t kFirstRowBytes = 256;
        return stats_.rows_parsed > 0 ? stats_.bytes_parsed / stats_.rows_parsed + 1 : kFirstRowBytes;
    }

    int64_t inline_target_bytes(int64_t rows) const {
        constexpr int64_t kMinBytes = 1 << 10;
        return std::max(kMinBytes, std::max<int64_t>(rows, 1) * bytes_per_row() * 21 / 20);
    }

    int64_t max_line_bytes() const { return opt_.buffer_bytes / kSparseQueueBlocks; }

    // Peer parsing: the share's next pieces, until `into` holds at least `rows` rows (or the share ends), each
    // copied from a helper or parsed here.
    bool take_pieces(CsrBatch& into, int64_t rows) {
        into.clear();
        while (into.rows() < std::max<int64_t>(rows, 1)) {
            if (next_piece_ >= board_->pieces()) {
                finished_ = true;
                break;
            }
            const int64_t before = into.rows();
            if (board_->take(next_piece_, into)) {
                std::lock_guard<std::mutex> lock(mu_);
                stats_.rows_from_peers += into.rows() - before;
            } else {
                // This piece and the next ones no helper has claimed, up to about the rows still wanted, read and
                // parsed as one text: a piece at a time, the owner's bookkeeping (finding its lines, a parse loop,
                // two clock reads and a lock) came a piece at a time too.
                const auto t0 = std::chrono::steady_clock::now();
                int64_t last = next_piece_;
                const int64_t run = std::min<int64_t>(kMaxOwnRun, own_run_pieces(std::max<int64_t>(rows, 1) - into.rows()));
                while (last + 1 < board_->pieces() && last + 1 < next_piece_ + run && board_->claim_own(last + 1))
                    ++last;
                int64_t offset = 0;
                std::string_view text;
                if (!read_sparse_pieces(*own_file_, board_->share_begin(), board_->share_end(), next_piece_, last,
                                        max_line_bytes(), text, offset))
                    throw_line_too_long(opt_.file, sparse_line_number_at(opt_.file, offset), max_line_bytes());
                const int64_t got = parse_sparse_piece(text, offset, *parser_, opt_.file, into);
                for (; next_piece_ < last; ++next_piece_) board_->finish_own(next_piece_);
                board_->finish_own(next_piece_);
                const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                std::lock_guard<std::mutex> lock(mu_);
                stats_.parse_seconds += secs;
                stats_.rows_parsed += got;
                stats_.bytes_parsed += static_cast<int64_t>(text.size());
            }
            ++next_piece_;
        }
        std::lock_guard<std::mutex> lock(mu_);
        stats_.peak_queued_rows = std::max(stats_.peak_queued_rows, into.rows());
        stats_.peak_queued_bytes = std::max(stats_.peak_queued_bytes, csr_bytes(into));
        return into.rows() > 0;
    }

    // Pieces of the share that hold about `rows` rows, by the bytes a row took so far (at least one). At most
    // kMaxOwnRun at once: well inside the window of SparsePeerBoard::kSlots, so helpers still find pieces to claim.
    static constexpr int64_t kMaxOwnRun = 16;
    int64_t own_run_pieces(int64_t rows) const {
        return std::max<int64_t>(1, (rows * bytes_per_row() + kSparsePieceBytes - 1) / kSparsePieceBytes);
    }

    // The next lines of the share (about `rows` of them) parsed here, on the calling thread, into `into`; false at
    // the end of the share.
    bool parse_chunk_inline(CsrBatch& into, int64_t rows) {
        if (board_) return !finished_ && take_pieces(into, rows);
        for (;;) {
            const auto t0 = std::chrono::steady_clock::now();
            if (finished_ || !source_->next(chunk_, inline_target_bytes(rows))) {
                finished_ = true;
                return false;
            }
            into.clear();
            const int64_t got = parse_chunk(chunk_, *parser_, *source_, opt_.file, into);
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::lock_guard<std::mutex> lock(mu_);
            stats_.parse_seconds += secs;
            stats_.rows_parsed += got;
            stats_.bytes_parsed += static_cast<int64_t>(chunk_.text.size());
            stats_.peak_raw_bytes = source_->peak_raw_bytes();
            stats_.peak_queued_rows = std::max(stats_.peak_queued_rows, got);
            stats_.peak_queued_bytes = std::max(stats_.peak_queued_bytes, csr_bytes(into));
            if (got > 0) return true;
        }
    }

    // The next block on the calling thread: what parse_ahead queued first, else parsed now, into the largest buffer
    // at hand. Buffers circulate between current_, the queue and spare_; parsing a batch's rows into a 32-row
    // piece's buffer regrew it step after step (at batch 16384, reallocation copies and page faults cost a third of
    // the parse; bench/RESULTS.md, "The sparse reader's buffers").
    bool parse_block_inline() {
        if (queue_.empty()) {
            adopt_largest_spare();
            return parse_chunk_inline(current_, want_rows_);
        }
        if (current_.rows() == 0 && spare_.size() < kSpareBlocks) spare_.push_back(std::move(current_));
        current_ = std::move(queue_.front());
        queue_.pop_front();
        queued_rows_ -= current_.rows();
        queued_bytes_ -= csr_bytes(current_);
        return true;
    }

    // Swaps current_ (empty) with the spare buffer of the largest capacity, when that one is larger.
    void adopt_largest_spare() {
        const auto larger = [](const CsrBatch& a, const CsrBatch& b) {
            return a.indices.capacity() < b.indices.capacity();
        };
        const auto it = std::max_element(spare_.begin(), spare_.end(), larger);
        if (it != spare_.end() && larger(current_, *it)) std::swap(current_, *it);
    }

    // The next queued block into current_; false at the end of the share (rethrows the parse thread's error).
    bool take_block() {
        if (parse_inline_) return parse_block_inline();
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [&] { return !queue_.empty() || finished_; });
        if (queue_.empty()) {
            lock.unlock();
            if (worker_.joinable()) worker_.join();
            if (error_) std::rethrow_exception(error_);
            return false;
        }
        if (current_.indices.capacity() > 0 && free_.size() < kFreeBlocks) free_.push_back(std::move(current_));
        current_ = std::move(queue_.front());
        queue_.pop_front();
        queued_rows_ -= current_.rows();
        queued_bytes_ -= csr_bytes(current_);
        space_.notify_one();
        return true;
    }

    // The parse thread's next block: one the consumer has emptied when there is one. A new block for a 2 MiB chunk
    // is ~5 MB of CSR arrays, ~1,400 pages first touched while parsing (on the development VM ~9 us each, a fifth
    // of the thread's time; bench/RESULTS.md, "The sparse reader's buffers").
    CsrBatch recycled_block() {
        CsrBatch block;
        std::lock_guard<std::mutex> lock(mu_);
        if (!free_.empty()) {
            block = std::move(free_.back());
            free_.pop_back();
            block.clear();
        }
        return block;
    }

    SparseReaderOptions opt_;
    std::unique_ptr<SparseLineParser> parser_;
    std::unique_ptr<SparseTextSource> source_;
    SparseShuffleBuffer shuffle_;
    bool started_ = false;
    const bool parse_inline_;
    int64_t want_rows_ = 0;  // rows the batch being filled still needs (for inline_target_bytes)
    static constexpr size_t kSpareBlocks = 8;
    std::vector<CsrBatch> spare_;  // emptied blocks parse_ahead refills (no allocation per piece)
    TextChunk chunk_;  // the inline parse's text buffer, reused
    // Peer parsing (board_ set): this reader's window on its share (a chunk's bytes, as the text source reads), the
    // next piece of the share to take, and for helping a window per peer and the rows of the piece parsed for it.
    SparsePeerBoard* board_ = nullptr;
    std::unique_ptr<SparsePieceFile> own_file_;
    int64_t next_piece_ = 0;
    std::vector<std::unique_ptr<SparsePieceFile>> peer_files_;
    CsrBatch helped_;

    // Consumer side (the training thread).
    CsrBatch current_;
    const CsrBatch* cached_block_ = nullptr;
    int64_t current_row_ = 0;
    std::deque<CsrBatch> cache_;  // deque: pointers to its blocks stay valid as it grows
    size_t cache_pos_ = 0;
    bool cache_complete_ = false;
    bool exhausted_ = false;  // this epoch's rows are all handed out
    int64_t peak_shuffle_rows_ = 0, cached_rows_ = 0;

    // Shared with the parse thread, under mu_.
    mutable std::mutex mu_;
    std::condition_variable ready_, space_;
    std::deque<CsrBatch> queue_;
    static constexpr size_t kFreeBlocks = 2;
    std::vector<CsrBatch> free_;  // emptied blocks back to the parse thread (recycled_block)
    int64_t queued_rows_ = 0, queued_bytes_ = 0;
    bool finished_ = true, stop_ = false;
    std::exception_ptr error_;
    SparseReaderStats stats_;
    std::thread worker_;
};

}  // namespace

bool sparse_single_cpu() {
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) == 1;
}

std::unique_ptr<SparseBatchReader> open_sparse_reader(const SparseReaderOptions& options) {
    SparseReaderOptions opt = options;
    if (opt.shuffle_buffer < 0)
        throw InputError("data.shuffle_buffer must be >= 0 rows (0 = file order; got " +
                         std::to_string(opt.shuffle_buffer) + ")");
    if (opt.format == SparseFormat::Libsvm && opt.num_features == 0) {
        SparseReaderOptions whole = opt;
        whole.rank = 0;
        whole.world = 1;
        opt.num_features = sparse_num_features_for(scan_sparse_share(whole).max_index);
    }
    return std::make_unique<StreamingSparseReader>(std::move(opt));
}

}  // namespace ringtrain::data

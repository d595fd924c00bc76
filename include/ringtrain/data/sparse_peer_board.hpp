// Peer parsing: ranks on one host parse each other's next rows while they wait.
//
// Why: a bound rank parses its click-log lines on its training thread, and parsing is most of a sparse step (0.5 of
// 0.75 ms on the device's Xeon). Whichever rank is on the slower core at the moment parses inline while the other
// waits for it in the step's collectives, for hundreds of steps at a time (bench/RESULTS.md, "Sparse collectives
// through shared memory"): the waiting rank's own parse-ahead cannot help, the slow one needs its *own* rows. So a
// waiting rank parses the slow rank's next pieces into memory every rank of the host maps, and the slow rank copies
// them instead of parsing them. Only the parsing moves: every rank still trains on its own share, in file order, so
// batches and results are the same bits with or without it.
//
// Pieces: rank r's share [begin, end) of a plain file is cut at fixed byte offsets; piece k holds the lines whose
// first byte lies in [begin + k·P, begin + (k+1)·P) ∩ [begin, end), whoever parses it. The owner takes its pieces in
// order; a window of kSlots pieces from the next one it takes is open to helpers.
//
// Board layout (zero-filled shared memory, sparse_peer_board_bytes): per rank a header (its share, the next piece it
// takes) and kSlots slots, each an atomic word and room for one piece's CSR rows. A slot's word is
// (generation << 3) | state, the generation naming the piece (the owner's epoch count << 32 | piece): claims are
// compare-and-swaps on the exact piece, so a helper holding a stale view of the window can never claim the wrong one.
//   EMPTY  free for that piece          -> BUSY (a helper claims it) or MINE (the owner parses it itself)
//   BUSY   a helper parses it           -> READY (rows in the slot) or FAILED (it could not: too big, a bad line)
//   READY  rows waiting for the owner   -> the owner copies them, then EMPTY for the piece kSlots later
//   FAILED / MINE: the owner parses it itself, then EMPTY for the piece kSlots later
// A bad line always fails on its owner, whose own parse names the file and line. The owner waits for a BUSY slot
// (one piece's parse, tens of microseconds); a helper that dies takes the job down through the launcher.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ringtrain/core/csr_batch.hpp"

namespace ringtrain::data {

class SparseLineParser;

// Bytes of a plain file per piece: ~35 rows of a Criteo-like libsvm file, ~15 µs of parsing — fine enough that a
// helper looks at the collective between pieces, coarse enough that a piece's bookkeeping (one pread, a few atomics,
// one copy) stays small next to its parse.
inline constexpr int64_t kSparsePieceBytes = 4096;

// Shared-memory bytes a board for `ranks` readers needs.
size_t sparse_peer_board_bytes(int ranks);

class SparsePeerBoard {
public:
    // The window: ~2 batches of 1,024 Criteo-like rows. Each slot holds up to 1,024 rows and 2,048 features (25 KB).
    static constexpr int kSlots = 64;
    // A view of `base` (sparse_peer_board_bytes(ranks) zero-filled bytes every rank of the host maps); `me` is this
    // process's index among them. Throws Error when the bytes are too few.
    SparsePeerBoard(void* base, size_t bytes, int ranks, int me);

    int ranks() const { return ranks_; }
    int me() const { return me_; }

    // Owner side (rank me()).
    // Announces this rank's share of `path`, [begin, end) of the plain file, to the helpers. Once, before anything else.
    void publish_share(int64_t begin, int64_t end);
    // A new pass over the share from piece 0: waits for helpers busy on this rank's slots, then opens the window.
    void start_pass();
    // Piece k of this pass (taken in order): true when a helper's rows were appended to `out`; false when the owner
    // must parse it itself (then finish_own(k) after parsing).
    bool take(int64_t k, CsrBatch& out);
    // Piece k (after the one being taken, within the window) for the owner to parse with it, when no helper has
    // claimed it: true and the slot is the owner's (finish_own(k) after parsing); false when a helper has it.
    bool claim_own(int64_t k);
    void finish_own(int64_t k);
    int64_t pieces() const;  // of this rank's share
    int64_t share_begin() const;
    int64_t share_end() const;

    // Helper side: claims the first open piece of another rank's window (lowest rank first). On success fills
    // peer, piece and the peer's share, and the caller parses the piece and calls fill() or fail().
    struct Claim {
        int peer = -1;
        int64_t piece = -1;
        int64_t begin = 0, end = 0;
        uint64_t generation = 0;
    };
    bool claim(Claim& c);
    // Publishes the piece's rows; false (and fail()) when they do not fit the slot.
    bool fill(const Claim& c, const CsrBatch& rows);
    void fail(const Claim& c);

private:
    struct Header;
    struct Slot;
    Header& header(int r) const;
    Slot& slot(int r, int64_t k) const;
    float* slot_payload(int r, int64_t k) const;
    uint64_t generation(int64_t k) const { return (pass_ << 32) | static_cast<uint64_t>(k); }

    char* base_;
    int ranks_, me_;
    uint64_t pass_ = 0;  // this rank's passes started (the generation's high part)
};

// A plain file read through a window of its bytes: one pread per window, not per piece (a pread per ~35-row piece
// cost the owner ~10 % of a batch-256 step on the development VM; bench/RESULTS.md, "Peer parsing").
class SparsePieceFile {
public:
    // Opens `path` read-only; InputError when it cannot.
    SparsePieceFile(const std::string& path, int64_t window_bytes);
    ~SparsePieceFile();
    SparsePieceFile(const SparsePieceFile&) = delete;
    SparsePieceFile& operator=(const SparsePieceFile&) = delete;
    // Bytes [offset, offset + n), fewer at the end of the file; valid until the next call. Memory: the window, or
    // n when that is larger.
    std::string_view bytes(int64_t offset, int64_t n);

private:
    std::string path_;
    int fd_ = -1;
    int64_t window_;
    std::unique_ptr<char[]> buf_;  // not zero-filled: a 2 MiB std::string resize cost a memset per window
    int64_t buf_capacity_ = 0, buf_size_ = 0;
    int64_t buf_offset_ = 0;
    bool buf_ends_file_ = false;  // the last read stopped at the end of the file
};

// The text of piece k of the share [begin, end) of `file`: whole lines from the first line start at or after
// begin + k·P up to the end of the last line starting before min(begin + (k+1)·P, end); empty when no line starts
// there. `text` (valid until file's next read) starts at byte `text_offset`. False when that last line is longer than
// `max_line_bytes` (text_offset is then where it starts).
bool read_sparse_piece(SparsePieceFile& file, int64_t begin, int64_t end, int64_t k, int64_t max_line_bytes,
                       std::string_view& text, int64_t& text_offset);
// Pieces k..k_last as one text (the lines of each in turn), the same way.
bool read_sparse_pieces(SparsePieceFile& file, int64_t begin, int64_t end, int64_t k, int64_t k_last,
                        int64_t max_line_bytes, std::string_view& text, int64_t& text_offset);

// Parses a piece's lines into `out` (appending). A malformed line throws InputError naming `path` and its true line
// number (counted from the start of the file, only then); with an empty `path` the line's SparseLineError as it is
// (a helper, whose owner will parse the piece again and name the line).
int64_t parse_sparse_piece(std::string_view text, int64_t text_offset, const SparseLineParser& parser,
                           const std::string& path, CsrBatch& out);

}  // namespace ringtrain::data

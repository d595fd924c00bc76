// The sparse (click-log) input path: libsvm and Criteo-layout text files, plain or .gz, read streaming — each rank
// its own contiguous share of the training file's lines, in a bounded buffer, parsed on a separate thread into
// CsrBatch batches — so memory stays bounded whatever the file size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ringtrain/core/csr_batch.hpp"

namespace ringtrain::data {

class SparsePeerBoard;

enum class SparseFormat { Libsvm, Criteo };
enum class CriteoIntegers { Log2, Hash };

struct SparseReaderOptions {
    SparseFormat format = SparseFormat::Libsvm;
    std::string file;               // data.train_file or data.test_file
    int index_base = 1;             // libsvm: 1 (as libsvm) or 0
    int64_t num_features = 0;       // feature space; libsvm indices at or past it are an error naming file:line
    int hash_bits = 20;             // criteo: (column, value) pairs hash into 2^hash_bits features
    CriteoIntegers criteo_integers = CriteoIntegers::Log2;
    int64_t shuffle_buffer = 0;     // rows shuffled in memory (0 = file order)
    bool cache = false;             // keep this rank's parsed share in memory after the first pass
    int64_t buffer_bytes = 8 << 20; // bounded read-ahead of raw text
    uint64_t seed = 0;              // shuffle seed (combine with rank and epoch)
    int rank = 0, world = 1;        // this rank's share of the file's lines
    int64_t num_classes = 0;        // libsvm labels at or past it are an error naming file:line (0 = no check)
    // Where the text is parsed: Auto = on the calling thread when this process may run on one CPU only (taskset,
    // mpirun --bind-to core), else on a parse thread. On one CPU the thread cannot overlap anything: it only adds
    // context switches, queue handovers, and (with MPI's busy-polling collectives) steals the core from the
    // training thread's peers' wait, so a 2-rank job stalls on whichever rank's parser got the core.
    enum class ParseOn { Auto, Thread, Caller };
    ParseOn parse_on = ParseOn::Auto;
    // Peer parsing (sparse_peer_board.hpp): where set, a reader that parses on the caller over a plain file takes
    // its rows piece by piece through this board, so that its host's other ranks can parse them while they wait, and
    // parses theirs in help_peers(). Borrowed: it must outlive the reader. Batches are the same with or without it.
    SparsePeerBoard* peer_board = nullptr;
};

// Whether this process may run on one CPU only (its affinity mask has one CPU).
bool sparse_single_cpu();

// What a reader has held at most, for tests and the benchmark. Memory is bounded by the options whatever the
// file size: peak_raw_bytes <= buffer_bytes, at most kSparseQueueBlocks parsed blocks (each from at most
// buffer_bytes / kSparseQueueBlocks of text) wait in the queue, and the shuffle buffer holds shuffle_buffer rows.
// Emptied blocks keep their arrays for reuse (at most 2 with the parse thread, 8 parsing on the caller), so the
// memory held is a small multiple of one block's, still independent of the file's size. Only cache=true, by design,
// keeps the whole share (cached_rows).
inline constexpr int kSparseQueueBlocks = 4;
inline constexpr int64_t kSparseMinBufferBytes = 16 << 10;  // buffer_bytes below this is an InputError
// A line may be at most buffer_bytes / kSparseQueueBlocks bytes long (2 MiB by default); longer is an InputError.
struct SparseReaderStats {
    int64_t peak_raw_bytes = 0;     // raw text held by the read buffer (bytes of lines not yet parsed)
    int64_t peak_queued_rows = 0;   // parsed rows waiting between the parse thread and next()
    int64_t peak_queued_bytes = 0;  // their CSR bytes
    int64_t peak_shuffle_rows = 0;  // rows in the shuffle buffer
    int64_t cached_rows = 0;        // rows kept by cache=true
    int64_t rows_parsed = 0;        // rows parsed from text (all epochs)
    int64_t bytes_parsed = 0;       // text bytes parsed (all epochs, after decompression)
    double parse_seconds = 0;       // parse thread time spent reading and parsing, for parse MB/s and rows/s
    int64_t rows_from_peers = 0;    // peer parsing: rows of this rank's share other ranks parsed (not in rows_parsed)
    int64_t rows_for_peers = 0;     // rows of other ranks' shares this rank parsed for them
    double seconds_for_peers = 0;   // and the time it took
};

// One rank's stream of batches over its share of one file, epoch after epoch.
class SparseBatchReader {
public:
    virtual ~SparseBatchReader() = default;
    // Starts epoch `epoch` (reshuffles with seed, rank and epoch); the first call is epoch 0.
    virtual void start_epoch(int64_t epoch) = 0;
    // Fills `out` with up to `rows` rows; false (and `out` empty) when this rank's share is used up.
    virtual bool next(CsrBatch& out, int64_t rows) = 0;
    virtual int64_t num_features() const = 0;
    virtual std::string description() const = 0;
    virtual SparseReaderStats stats() const = 0;
    // Parses a few more rows of the share ahead of next() (tens of rows, microseconds) where this reader parses on
    // the calling thread, while at most `limit_rows` rows are parsed ahead; false when there is nothing to do (a
    // parse thread does it, a replayed cache, the limit reached, the share used up). For the time a rank would
    // spin in a collective waiting for a slower one (Communicator::allgatherv_into_while). next() returns the same
    // batches whether or not this ran.
    virtual bool parse_ahead(int64_t limit_rows) = 0;
    // Whether next() parses on the calling thread (one usable CPU, or ParseOn::Caller): only then has parse_ahead
    // anything to do.
    virtual bool parses_on_caller() const = 0;
    // Peer parsing: parses one piece of another rank's share that is open for help, for that rank (microseconds);
    // false when there is none, or no board. For the same waits as parse_ahead, before it.
    virtual bool help_peers() { return false; }
    // Whether this reader takes its rows through a peer board (options.peer_board, parsing on the caller, plain file).
    virtual bool parses_with_peers() const { return false; }
};

// Opens rank options.rank's share of options.file. Shares: a plain file is split into `world` byte ranges and a
// line belongs to the rank whose range holds its first byte (contiguous shares); a .gz file (gzip magic bytes) is
// decompressed by every rank, which keeps physical lines i (0-based, comments and empty lines included) with
// i % world == rank (round-robin). For libsvm with num_features == 0, the whole file is scanned first
// (scan_sparse_share with world 1) and the feature count is sparse_num_features_for(max index); trainers that
// already scanned should pass the value instead. Throws InputError for a missing file or bad options.
std::unique_ptr<SparseBatchReader> open_sparse_reader(const SparseReaderOptions& options);

// One pass over rank options.rank's share (as open_sparse_reader reads it), parsing every line (so a malformed
// line fails here, naming file and line). For `num_features: 0` (scan with world 1, or combine the ranks' shares:
// sum the rows, max the max_index).
struct SparseShareScan {
    int64_t rows = 0;         // data rows (not comments or empty lines)
    int64_t max_index = -1;   // largest feature id seen (after index_base), -1 when no feature at all
    int64_t max_label = -1;   // largest label (after -1 -> 0), -1 when no row
    int64_t bytes = 0;        // text bytes of the share (after decompression)
};
SparseShareScan scan_sparse_share(const SparseReaderOptions& options);

// The feature count for `num_features: 0`: max_index + 1 rounded up to a multiple of 1024 (so a test file whose
// indices go a little past the training file's still fits); at least 1024.
int64_t sparse_num_features_for(int64_t max_index);

}  // namespace ringtrain::data

// SparseGradientSync: averages a sparse gradient (SparseRows) plus a small dense part (the bias) across ranks,
// choosing per step between two ways (sync.sparse):
//   allgather — every rank's (row ids, values) gathered, then merged locally (Horovod's IndexedSlices path);
//   dense     — scattered into a dense [num_rows x width] buffer and allreduced (Horovod's sparse_as_dense);
//   auto      — whichever moves fewer bytes this step, decided from every rank's row count (which every rank
//               learns in the step's first collective, so all ranks pick the same way).
// One collective per step when the rows fit (the common case): every rank sends a fixed-size slot — a header
// (its row count and the dense part) and room for `capacity` rows — and capacity follows
// the largest count seen (identically on every rank: it is computed from gathered counts). A rank with more rows
// than the room sends the rest in a second collective (an allgatherv whose counts the first one told everyone);
// when auto then picks dense, the dense allreduce follows instead. The room is capped where the gathered slots
// would pass the dense allreduce's bytes, so auto never pays a slot that dense would have beaten.
// Both give the same result: the union of the ranks' rows, values summed and divided by the world size.
//
// Bytes each way moves per step (what choose() compares; N ranks, rows_r = rank r's row count, w = width,
// R = num_rows; the small dense part is left out of both, it is the same few bytes either way):
//   allgather: every rank's (4-byte id + 4w-byte row) reaches the N-1 others; per rank on average
//              A = (N-1)/N * sum_r rows_r * (4 + 4w)
//   dense:     a ring allreduce sends 2(N-1)/N of its buffer per rank; the buffer is the R*w table plus a packed
//              touched-count per row (the union of the ranks' rows must come back: a row whose sum is 0 is still
//              returned), floor(24/b) rows per float with b = bit_width(N), exact in float32 sums:
//              D = 2(N-1)/N * 4 * (R*w + ceil(R / floor(24/b)))
//   auto picks allgather when A <= D. One rank: nothing moves (A = D = 0, allgather).
//
// Who updates which rows (sync.sparse_update):
//   replicated — every rank merges every rank's rows and the caller updates the whole union (as many updates on
//                every rank as on one rank with the global batch);
//   owner      — on the allgather way at N > 1, every row has an owner (owner_of_row: a hash of its id; contiguous
//                ranges were tried first, but libsvm files number features by frequency, and ranges gave ~99 % of
//                the rows of a generated click log to rank 0). Each rank sends its rows grouped by owner (each group
//                sorted; the group sizes in its slot's header), and each rank merges only its own group of every
//                rank's list with the same arithmetic, in the same rank order, so its rows carry the bits
//                replicated would give them. The caller updates those
//                rows (and the dense part, on every rank), then share_updated_rows() sends every owner's updated
//                rows (weight and per-row optimizer state) to every rank: one more collective of fixed-size slots
//                [row count | ids | rows] whose room follows the largest owned count, rows past it in an
//                allgatherv. Weights and state then hold the same bits on every rank, as with replicated.
//                Per rank the merge walks ~1/N of every list and the optimizer ~1/N of the union; what it adds is
//                copying the others' rows in. The dense way returns the whole union as before (owned_rows_only()
//                false), and auto compares the gradient's bytes only (the owners' union is known only after the
//                merge), so both modes take the same way on the same step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/sparse_rows.hpp"

namespace ringtrain::sync {

enum class SparseSyncMethod { Auto, Allgather, Dense };
enum class SparseUpdate { Replicated, Owner };

struct SparseSyncStats {
    int64_t allgather_steps = 0;  // steps combined by allgather + merge
    int64_t dense_steps = 0;      // steps combined by a dense allreduce
    uint64_t bytes_allgather = 0; // payload bytes this rank sent on the allgather steps
    uint64_t bytes_dense = 0;     // payload bytes this rank sent on the dense steps (the ring's 2(N-1)/N share)
    // Both byte counts are the model above applied to this rank (allgather: its own ids, rows and dense part sent
    // to N-1 peers; dense: 2(N-1)/N of the whole buffer incl. the dense part), not a transport counter, so they
    // mean the same on every backend. The per-step header (the count) and a slot's unused room are not included.
    int64_t second_collectives = 0;  // steps whose rows did not fit the slots (a second collective followed)
    // Owner updates: steps whose rows were merged and updated by their owners, the payload bytes this rank sent
    // sharing its updated rows ((N-1) x its rows x (4-byte id + row_floats x 4), also counted in bytes_allgather:
    // they are part of that way's cost), and shares whose rows did not fit the slots.
    int64_t owner_steps = 0;
    uint64_t bytes_state = 0;
    int64_t state_second_collectives = 0;
};

class SparseGradientSync {
public:
    // num_rows x width is the sparse table's shape (features x out_features). Keeps a reference to comm.
    SparseGradientSync(comm::Communicator& comm, int64_t num_rows, int64_t width, SparseSyncMethod method,
                       SparseUpdate update = SparseUpdate::Replicated);
    ~SparseGradientSync();
    SparseGradientSync(const SparseGradientSync&) = delete;
    SparseGradientSync& operator=(const SparseGradientSync&) = delete;

    // Set-up: allocates the dense way's buffer now, for a dense part of `dense_size` floats (what average() will
    // be given), so a table too large for it fails at start-up, not at the first dense step. Nothing for method
    // Allgather or one rank (which never take the dense way).
    void allocate_dense_buffer(size_t dense_size);

    // Replaces `grad` (this rank's rows, sorted unique) by the rank average and `dense` by its rank average.
    // Collective: every rank calls it once per step, also a rank whose batch touched no row.
    void average(SparseRows& grad, std::span<float> dense);

    // Owner updates: true when the last average() left in `grad` only the rows this rank owns (the allgather way
    // at N > 1): the caller updates them, then calls share_updated_rows. False on the dense way, with one rank and
    // with replicated updates: `grad` holds the whole union and every rank updates all of it.
    bool owned_rows_only() const;
    // After an owned_rows_only() step, collective: `rows` in = this rank's updated rows (its owned rows of the
    // step, sorted, each `rows.width` floats: the weight row and the optimizer's per-row state; the same width on
    // every rank), out = every other rank's, rank by rank (each rank's sorted), for the caller to write in.
    // `sums` (a few numbers, as many on every rank) travel in the same collective and come back summed over the
    // ranks: the trainer defers the share to its next step's opening allreduce and sends that allreduce's numbers
    // here, so an owner step still makes two collectives (the share must come before anything reads the table).
    void share_updated_rows(SparseRows& rows, std::span<double> sums = {});
    // The rank of `world` that owns `row` with owner updates: a multiplicative hash of the id, so that any id
    // pattern (frequency-ranked ids, hashed ids, strided ids) spreads evenly over the ranks.
    static int owner_of_row(uint32_t row, int world);

    // Which way `method` would combine rows_per_rank (each rank's row count) on `world` ranks, and the payload
    // bytes each rank would send by either way: the arithmetic auto uses, exposed for tests and the benchmark.
    struct Choice {
        SparseSyncMethod method;
        uint64_t allgather_bytes, dense_bytes;
    };
    static Choice choose(SparseSyncMethod method, std::span<const int64_t> rows_per_rank, int64_t num_rows,
                         int64_t width);

    const SparseSyncStats& stats() const;

    // Work for the time this rank waits in the step's gathers (Communicator::allgatherv_into_while): the sparse
    // trainer parses its next rows there instead of spinning until a slower rank arrives. Empty = just wait.
    void set_idle_work(std::function<bool()> idle);

private:
    struct State;
    std::unique_ptr<State> state_;
};

}  // namespace ringtrain::sync

// SharedMemoryAllreduce: allreduce among the ranks of one node through a shared-memory segment, with no MPI
// message, no syscall and no handshake per call — what NCCL and DeepSpeed do inside a node, used by the ring backend.
//
// Per chunk of the message (at most chunk_bytes of float32), cut into N segments (remainder over the first ones),
// segment r owned by rank r: every rank copies the other ranks' segments of its chunk into its own slot; barrier;
// rank r adds the others' contributions to segment r into its own buffer in a fixed order (r+1, …, r−1) and publishes
// the result in its slot; barrier; every rank copies the other finished segments out. Each rank's own segment never
// makes a round trip through shared memory (at N = 2 that halves the copies). One owner per segment, so the result
// is bitwise identical on every rank and the same run to run. The slots are double-buffered
// (chunk k uses buffer k mod 2): a rank can only overwrite a buffer after the next chunk's first barrier, which every
// rank passes only once it has finished reading that buffer, so two barriers per chunk suffice.
//
// 16-bit wire formats: the slot holds 16-bit encodings; the owner adds the decoded contributions to its own float32
// values, scales (Average) and publishes its finished segment as 16 bits, which everyone (itself included) decodes:
// every value that travels is rounded to 16 bits on the way in, every result once at the end; the bytes are half.
//
// The segment is a SharedSegment (created by local rank 0, unlinked once mapped; destruction only unmaps).
// Waiting spins briefly, then yields the core, then sleeps between polls (ranks may outnumber cores, or share them
// with other work: a peer that is not running must get a core). A rank that dies is handled by the launcher
// (mpirun or srun kills the job); a rank stuck in a collective is reported by the stall watchdog as for MPI.
//
// The same segment also serves the two small per-step collectives of the sparse path (sync/sparse_gradient_sync):
// an allgather of known counts and a reduction of a few doubles. Through MPI they cost tens of microseconds each
// when the caller lends the wait to other work (Open MPI's non-blocking collectives; bench/RESULTS.md, "Parsing in
// the waits"); here a round is one copy in, one barrier, the copies out, and the wait polls the caller's work
// between checks of the peers' counters. One barrier a round suffices: a rank writes buffer b again only two rounds
// (or allreduce chunks) later, after passing the next round's barrier, which every rank reaches only once it has
// finished reading buffer b.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/half.hpp"
#include "ringtrain/comm/shared_segment.hpp"

namespace ringtrain::comm {

class SharedMemoryAllreduce {
public:
    // Collective over `node`, whose ranks must all share one host (MPI_COMM_TYPE_SHARED). Returns nullptr on every
    // rank when any rank could not create or map the segment; `why` then says what failed (on the ranks where it did).
    static std::unique_ptr<SharedMemoryAllreduce> create(MPI_Comm node, size_t chunk_bytes, std::string* why = nullptr);
    ~SharedMemoryAllreduce();
    SharedMemoryAllreduce(const SharedMemoryAllreduce&) = delete;
    SharedMemoryAllreduce& operator=(const SharedMemoryAllreduce&) = delete;

    // In place over all ranks of the node. op: Sum, Max or Min (the caller scales an Average) for Float32; any op for
    // the 16-bit formats (Average is scaled before the final rounding). Adds the bytes its peers read from this rank's
    // slot (sent) and that it read from theirs (received): 2(N−1)/N of the payload each way, as a ring.
    void allreduce(float* data, size_t count, ReduceOp op, WireFormat wire, uint64_t& sent, uint64_t& received);
    // Every rank's `mine` (counts[r] floats from rank r; every rank passes the same counts) concatenated in rank order
    // into out, in rounds of at most one slot per rank. While peers have not arrived, `idle` (when set) is called
    // again and again; once it returns false the call only waits. Adds the bytes peers read from this rank's slot
    // and the bytes it read from theirs.
    void allgatherv(const float* mine, std::span<const size_t> counts, float* out, const std::function<bool()>& idle,
                    uint64_t& sent, uint64_t& received);
    // In place over all ranks for a few doubles (at most max_small_doubles()): every rank's values through its slot,
    // one barrier, then every rank combines all slots in rank order, so the bits are the same on every rank. op Sum,
    // Max or Min (the caller scales an Average). `idle` as for allgatherv.
    void allreduce_small(double* data, size_t count, ReduceOp op, const std::function<bool()>& idle, uint64_t& sent,
                         uint64_t& received);
    size_t max_small_doubles() const { return slot_bytes_ / sizeof(double); }
    // The ranks that have not yet reached the barrier this rank waits in (empty when it waits in none): read from
    // the arrival counters, so any thread may ask while the allreduce runs (the stall watchdog names them).
    std::vector<int> late_ranks() const;

private:
    SharedMemoryAllreduce(std::unique_ptr<SharedSegment> segment, size_t chunk_elems, size_t slot_bytes);
    std::atomic<uint64_t>& arrived(int r) const;
    void* slot(int buffer, int r) const;
    // Publishes this rank's arrival and waits for every peer's, calling idle (when set) between checks while it
    // has work.
    void barrier(const std::function<bool()>* idle = nullptr);

    std::unique_ptr<SharedSegment> segment_;
    void* base_ = nullptr;
    int rank_ = 0;
    int size_ = 1;
    size_t chunk_elems_ = 1;  // floats per slot
    size_t slot_bytes_ = 0;
    uint64_t epoch_ = 0;      // barriers passed: our arrival counter's value
    std::atomic<uint64_t> waiting_for_epoch_{0};  // the barrier being waited in, 0 = none (for late_ranks)
    uint64_t chunks_done_ = 0;  // chunk k uses buffer k % 2 (allgather rounds and small reductions count as chunks)
    std::vector<size_t> part_starts_;  // allgatherv: where each rank's part starts in the output (kept across calls)
};

}  // namespace ringtrain::comm

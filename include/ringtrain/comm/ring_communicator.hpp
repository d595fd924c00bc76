// RingCommunicator ("ring"): our own float allreduce over non-blocking MPI point-to-point.
//
// Large messages: bandwidth-optimal ring. The buffer is cut into N segments (remainder spread over the first ones);
// reduce-scatter runs N−1 steps (send a segment to the right neighbour, receive one from the left and reduce it
// into ours), then allgather runs N−1 steps (forward the finished segments around). Each segment is cut into
// pipeline chunks and the whole exchange is streamed chunk by chunk: receives are posted `pipeline_depth` chunks
// ahead into a small scratch ring (cache-resident), so receiving chunk i+1 overlaps reducing chunk i, and a reduced
// chunk is forwarded at once, so consecutive steps overlap too. Allgather receives land directly in the user buffer.
//
// Small messages (< small_message_bytes): recursive doubling, log2(N) exchanges of the whole buffer; a world size
// that is not a power of two first folds the 2·(N−P) lowest ranks pairwise into P (a power of two) and sends
// the result back at the end.
//
// 16-bit wire formats (allreduce(data, op, Float16|BFloat16)): the same two algorithms, chosen by the same float32
// size rule (so the 16-bit call moves exactly half the bytes of the Float32 call), with every transfer 16-bit:
//  - ring: a rank converts each chunk it sends to 16 bits (its own segment at step 0, then each chunk just reduced),
//    receives 16-bit chunks and accumulates them into its float32 data. The rank that finishes a segment scales it
//    (Average) and rounds it to 16 bits in place, and the allgather forwards those 16-bit finished segments, each
//    rank decoding them into its buffer. So every element is rounded to 16 bits once per hop (N−1 partial sums) and
//    once at the end, and the result is bitwise the same on every rank.
//  - recursive doubling: before each exchange a rank rounds its current values to 16 bits in place and sends them;
//    the sum of the two 16-bit operands is formed in float32 (the same on both partners). The result is scaled
//    (Average) and rounded to 16 bits at the end; the folded-out ranks receive that 16-bit result.
// A 16-bit conversion copy of the buffer (2 bytes per element) is kept and grown like the scratch.
//
// Single node (every rank on one host, MPI_COMM_TYPE_SHARED): with shared_memory_max_bytes > 0, messages (at two
// ranks those up to that float32 size, from three ranks on all; both wire formats) go through a shared-memory
// segment (SharedMemoryAllreduce: copy in, each rank finishes one segment, copy out; no MPI message). If the segment
// cannot be created, rank 0 says so once and the MPI paths above are used. choose_path() makes the choice.
//
// Results are deterministic run to run (fixed summation order for a given count and world size) and bitwise
// identical on every rank. Scratch is allocated once and grown, never per call. Byte counters are exact.
// NaN inputs to Max/Min may give rank-dependent results.
#pragma once

#include <memory>
#include <vector>

#include "ringtrain/comm/mpi_communicator.hpp"
#include "ringtrain/comm/shared_memory_allreduce.hpp"

namespace ringtrain::comm {

struct RingOptions {
    // Messages below this many bytes use recursive doubling; at or above it, the ring. 0 = always the ring.
    // Default from bench/allreduce (bench/RESULTS.md, "Allreduce benchmark: our ring vs MPI_Allreduce").
    size_t small_message_bytes = 128 * 1024;
    // Pipeline chunk size (bytes, rounded down to whole floats, at least one float).
    size_t chunk_bytes = 512 * 1024;
    // Receives posted ahead of the one being reduced (scratch = depth × chunk).
    int pipeline_depth = 4;
    // Recursive doubling sends each exchange in pieces of at most this many bytes, all in flight at once, so each
    // stays under the MPI library's eager limit (Open MPI shared memory: 4 KiB including its header) and needs no
    // rendezvous handshake.
    size_t small_piece_bytes = 4000;
    // Power-of-two worlds of 4 or more ranks reduce float32 messages from small_message_bytes up to (not including)
    // this size by recursive halving (reduce-scatter) + recursive doubling (allgather), Rabenseifner's algorithm:
    // the ring's bytes in log2(N) steps each way instead of N−1, which wins while per-step latency matters
    // (bench/RESULTS.md, "Follow-up: recursive halving + doubling at N = 4"). 0 = never.
    // 16-bit wire formats make the same choice (by the float32 size), so their bytes are exactly half.
    size_t halving_max_bytes = 4u << 20;
    // Single-node worlds: 0 = never use shared memory (the default here, so tests and benchmarks that name the MPI
    // paths get them; ring_backend_defaults() turns it on). Otherwise, at two ranks, messages up to this many bytes
    // (float32 size) go through shared memory, and from three ranks on every message does. Why the difference: per
    // rank and byte of message, the shared-memory path reads ~(3(N−1)+1)/N and writes ~2 bytes of memory, the
    // single-copy ring 4(N−1)/N and 3(N−1)/N: at N = 2 the ring touches less memory (2 / 1.5 against 2 / 2), which
    // wins once messages outgrow the caches; at N = 4 it touches more (3 / 2.25 against 2.5 / 2).
    size_t shared_memory_max_bytes = 0;
    // Shared-memory chunk: each rank's slot (two of them, double-buffered) holds this many bytes of float32.
    size_t shared_memory_chunk_bytes = 256 * 1024;
};

// At two ranks, up to this size the shared-memory path beat MPI point-to-point; beyond it, it was at parity or
// behind, as the memory traffic above predicts. From three ranks on it won at every size, so it is used for all
// (bench/RESULTS.md, "Shared-memory allreduce").
inline constexpr size_t kSharedMemoryMaxBytes = size_t{16} << 20;

// What make_communicator("ring") and bench_allreduce use: RingOptions{} plus the shared-memory path up to
// kSharedMemoryMaxBytes (0 when RINGTRAIN_SHARED_MEMORY=0|off|false is set).
RingOptions ring_backend_defaults();

class RingCommunicator final : public MpiCommunicatorBase {
public:
    explicit RingCommunicator(RingOptions options = {}, MPI_Comm parent = MPI_COMM_WORLD);
    ~RingCommunicator() override;

    std::string backend() const override { return "ring"; }
    void allreduce(std::span<float> data, ReduceOp op = ReduceOp::Sum) override;
    void allreduce(std::span<float> data, ReduceOp op, WireFormat wire) override;
    using MpiCommunicatorBase::allreduce;
    // Single node with shared memory: these go through the segment (the sparse path's per-step collectives; see
    // SharedMemoryAllreduce), under the same size rule as the allreduce (by the gathered float32 total); otherwise
    // MPI's, as for the mpi backend.
    // (allgatherv_into is the base's, which calls this one without idle work.)
    void allgatherv_into_while(std::span<const float> mine, std::span<const size_t> counts, std::span<float> out,
                               const std::function<bool()>& idle) override;
    void allreduce_while(std::span<double> data, ReduceOp op, const std::function<bool()>& idle) override;

    const RingOptions& options() const { return options_; }
    // True when this communicator has a shared-memory segment (single node, enabled, created on every rank).
    bool uses_shared_memory() const { return shm_ != nullptr; }
    // The shared-memory path's late peers (SharedMemoryAllreduce::late_ranks); "" on the MPI paths.
    std::string waiting_for() const override;

    // The algorithm for a message of `count` floats, by its float32 size whatever the wire format.
    enum class Path { SharedMemory, RecursiveDoubling, HalvingDoubling, Ring };
    // The MPI path a world of `world` ranks takes for `count` floats with `options` (no shared memory): the one rule,
    // which the scaling model reads too (scaling::ring_backend_choice).
    static Path mpi_path(size_t count, int world, const RingOptions& options);

private:
    Path choose_path(size_t count) const;
    bool use_shared_memory(size_t count) const;
    // Runs the chosen path. W = float (wire = the data itself; an average arrives as a sum, scaled by the caller) or
    // uint16_t (wire = a 16-bit copy in `wire_`, format `fmt`; the path scales an average before its last rounding).
    template <class W>
    void allreduce_by_path(float* data, size_t count, ReduceOp op, WireFormat fmt);
    void shared_memory_allreduce(float* data, size_t count, ReduceOp op, WireFormat wire);  // counts the bytes
    // The paths, W as above. Recursive halving + doubling needs size_ a power of two.
    template <class W>
    void recursive_doubling(float* data, size_t count, ReduceOp op, WireFormat fmt);
    template <class W>
    void halving_doubling(float* data, size_t count, ReduceOp op, WireFormat fmt);
    template <class W>
    void ring_allreduce(float* data, size_t count, ReduceOp op, WireFormat fmt);
    // Sends `count` elements from `send` to `dest` and/or receives as many from `source` (nullptr: that side is
    // skipped), in pieces of small_piece_bytes; counts the bytes.
    template <class W>
    void exchange(const W* send, int dest, W* recv, int source, size_t count);

    struct Buffer {
        void* p = nullptr;  // 64-byte aligned, grown, never shrunk
        size_t bytes = 0;
    };
    static void* ensure(Buffer& b, size_t bytes);

    RingOptions options_;
    size_t chunk_bytes_ = 4;
    Buffer scratch_;  // receive slots (ring) or the partner's data (recursive doubling)
    Buffer wire_;     // 16-bit copy of the data being reduced
    std::vector<MPI_Request> send_requests_;
    std::vector<MPI_Request> recv_requests_;
    std::vector<size_t> send_step_base_;
    std::vector<MPI_Request> small_requests_;
    std::unique_ptr<SharedMemoryAllreduce> shm_;
};

}  // namespace ringtrain::comm

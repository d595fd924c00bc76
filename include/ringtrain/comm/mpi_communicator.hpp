// MPI-backed communicators. MpiCommunicatorBase holds what every backend shares (its own duplicate of
// MPI_COMM_WORLD, rank/size, node-local rank/size, byte counters, and broadcast/allgather/barrier/double
// allreduce through MPI collectives); MpiCommunicator ("mpi") adds the float allreduce via MPI_Allreduce.
//
// Threading: one Communicator may be used by one thread at a time (MPI requires collectives on a communicator to
// be issued in the same order on every rank). Use one communicator per thread; each has its own MPI communicator,
// so calls on different Communicators never mix, even concurrently (needs MPI_THREAD_MULTIPLE).
#pragma once

#include <mpi.h>

#include <atomic>
#include <vector>

#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::comm {

// Bytes a ring allreduce of `count` floats sends / receives on `rank` of `size` ranks: the buffer is cut into `size`
// segments (remainder spread over the first ones); rank r sends every segment but (r+1) and (r+2) once in each phase
// and receives every segment but r and (r+1). Totals ≈ 2(N−1)/N · 4·count each way.
struct ByteCount {
    uint64_t sent = 0;
    uint64_t received = 0;
};
ByteCount ring_allreduce_bytes(size_t count, size_t elem_size, int rank, int size);

class MpiCommunicatorBase : public Communicator {
public:
    // Duplicates `parent` (collective over it), so this communicator's traffic never mixes with anyone else's.
    explicit MpiCommunicatorBase(MPI_Comm parent = MPI_COMM_WORLD);
    ~MpiCommunicatorBase() override;
    MpiCommunicatorBase(const MpiCommunicatorBase&) = delete;
    MpiCommunicatorBase& operator=(const MpiCommunicatorBase&) = delete;

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    int local_rank() const override { return local_rank_; }
    int local_size() const override { return local_size_; }

    // Metrics reductions in double via MPI_Allreduce (Average = sum then scale by 1/size).
    void allreduce(std::span<double> data, ReduceOp op = ReduceOp::Sum) override;
    void allreduce_while(std::span<double> data, ReduceOp op, const std::function<bool()>& idle) override;
    using Communicator::allreduce;
    void broadcast(std::span<float> data, int root) override;
    void broadcast_bytes(std::span<std::byte> data, int root) override;
    std::vector<float> allgather(std::span<const float> mine) override;
    std::vector<uint64_t> allgather(uint64_t mine) override;
    void allgatherv_into(std::span<const float> mine, std::span<const size_t> counts, std::span<float> out) override;
    // MPI_Iallgatherv, MPI_Test between calls of idle.
    void allgatherv_into_while(std::span<const float> mine, std::span<const size_t> counts, std::span<float> out,
                               const std::function<bool()>& idle) override;
    std::vector<float> gather(std::span<const float> mine, int root) override;
    std::vector<std::byte> allgather_bytes(std::span<const std::byte> mine) override;
    void barrier() override;

    // For MPI collectives the counters are estimates of what a bandwidth-optimal algorithm moves (MPI does not
    // say what its algorithm sent): allreduce as a ring (see ring_allreduce_bytes), broadcast S received on every
    // non-root and S sent by the root, allgather as a ring (received: everyone else's parts; sent: all parts but
    // the right neighbour's), gather: each rank sends its part, the root receives the others'.
    uint64_t bytes_sent() const override { return sent_.load(std::memory_order_relaxed); }
    uint64_t bytes_received() const override { return received_.load(std::memory_order_relaxed); }

    // Prints "ringtrain: rank R: <message>" to stderr, then MPI_Abort(MPI_COMM_WORLD, exit_code).
    [[noreturn]] void abort(const std::string& message, int exit_code) override;

    MPI_Comm mpi_comm() const { return comm_; }

protected:
    // allgatherv_into's argument checks (counts for every rank, this rank's part and the output sized as they say),
    // the same on every rank, so a mismatch throws everywhere before anything is sent; returns the total.
    size_t check_allgatherv(std::span<const float> mine, std::span<const size_t> counts, std::span<float> out) const;
    void count_bytes(uint64_t sent, uint64_t received) {
        sent_.fetch_add(sent, std::memory_order_relaxed);
        received_.fetch_add(received, std::memory_order_relaxed);
    }
    void count_ring_allreduce(size_t count, size_t elem_size) {
        const ByteCount b = ring_allreduce_bytes(count, elem_size, rank_, size_);
        count_bytes(b.sent, b.received);
    }

    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0;
    int size_ = 1;
    int local_rank_ = 0;
    int local_size_ = 1;

private:
    std::atomic<uint64_t> sent_{0};
    std::atomic<uint64_t> received_{0};
};

// "mpi": float allreduce via MPI_Allreduce(MPI_IN_PLACE). Byte counters are the ring estimate (see above).
// 16-bit wire formats: the data is converted to 16 bits and reduced by MPI_Allreduce over a 2-byte datatype with a
// user-defined commutative MPI_Op that decodes both operands, combines them in float32 and rounds the result back to
// 16 bits (so every partial result MPI moves is 16-bit); the result is decoded, then scaled by 1/size for Average.
// Ops and datatype are created with the communicator and freed with it.
class MpiCommunicator final : public MpiCommunicatorBase {
public:
    explicit MpiCommunicator(MPI_Comm parent = MPI_COMM_WORLD);
    ~MpiCommunicator() override;
    std::string backend() const override { return "mpi"; }
    void allreduce(std::span<float> data, ReduceOp op = ReduceOp::Sum) override;
    void allreduce(std::span<float> data, ReduceOp op, WireFormat wire) override;
    using MpiCommunicatorBase::allreduce;

private:
    MPI_Datatype type16_ = MPI_DATATYPE_NULL;  // 2 contiguous bytes
    MPI_Op ops16_[2][3] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}, {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};  // [fp16|bf16][sum|max|min]
    std::vector<uint16_t> wire16_;  // grown, never shrunk
};

}  // namespace ringtrain::comm

// Communicator: the collectives data parallelism needs (allreduce, broadcast, allgather, barrier), with
// implementations over MPI collectives ("mpi"), our own ring over MPI point-to-point ("ring") and NCCL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ringtrain/comm/half.hpp"

namespace ringtrain::comm {

enum class ReduceOp { Sum, Average, Max, Min };

class Communicator {
public:
    virtual ~Communicator() = default;

    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual int local_rank() const = 0;
    virtual int local_size() const = 0;
    virtual std::string backend() const = 0;

    // In place over all ranks; every rank must call with the same count. Average = sum then scale by 1/size.
    virtual void allreduce(std::span<float> data, ReduceOp op = ReduceOp::Sum) = 0;
    // The same with a choice of wire format. Float32 is the call above. Float16/BFloat16 ("compression"): every
    // value sent is first rounded to 16 bits, received values are combined in float32, and the result is the
    // 16-bit rounding of the float32 reduction on every rank (Average: scaled before that last rounding where the
    // backend allows, see each backend). Traffic and the byte counters are half of the Float32 call's.
    // The default implementation handles Float32 only and throws Error for the 16-bit formats.
    virtual void allreduce(std::span<float> data, ReduceOp op, WireFormat wire);
    // Small reductions of metrics (counts, loss sums) in double precision.
    virtual void allreduce(std::span<double> data, ReduceOp op = ReduceOp::Sum) = 0;
    // The double allreduce lending its wait to `idle`, as allgatherv_into_while (for a few numbers a step: the
    // sparse trainer's loss and stop vote). The default is the blocking allreduce.
    virtual void allreduce_while(std::span<double> data, ReduceOp op, const std::function<bool()>& idle);
    virtual void broadcast(std::span<float> data, int root) = 0;
    virtual void broadcast_bytes(std::span<std::byte> data, int root) = 0;
    // Concatenation of every rank's `mine` in rank order; counts may differ between ranks.
    virtual std::vector<float> allgather(std::span<const float> mine) = 0;
    virtual std::vector<uint64_t> allgather(uint64_t mine) = 0;
    // The same concatenation into `out` when every rank already knows every count (counts[r] floats from rank r;
    // out holds their sum): one collective, no count exchange and no fresh vector, for per-step use (the sparse
    // gradient sync). The default calls allgather() and copies; the MPI backends override it.
    virtual void allgatherv_into(std::span<const float> mine, std::span<const size_t> counts, std::span<float> out);
    // allgatherv_into that lends its wait to other work: until the collective completes, `idle` is called again and
    // again (it does a small piece of work, microseconds, and returns true; false when it has none left, and the
    // call then blocks). A rank that would otherwise spin waiting for a slower one works ahead instead (the sparse
    // path parses its next rows). The default runs the blocking collective and never calls idle.
    virtual void allgatherv_into_while(std::span<const float> mine, std::span<const size_t> counts,
                                       std::span<float> out, const std::function<bool()>& idle);
    // Every rank's `mine` concatenated in rank order on `root` only (the others get an empty vector); counts may
    // differ between ranks. For a result one rank computes from everything (then broadcasts): the other ranks
    // receive nothing, where allgather() would send every rank everything. The default calls allgather(); the MPI
    // backends override it with MPI_Gatherv.
    virtual std::vector<float> gather(std::span<const float> mine, int root);
    // Every rank's `mine`, concatenated in rank order. Every rank must pass the same number of bytes; a rank whose
    // count differs gets an Error naming both counts (on every rank, so none waits in a later collective).
    virtual std::vector<std::byte> allgather_bytes(std::span<const std::byte> mine) = 0;

    // Typed wrappers over the byte collectives for plain structs (loop positions, RNG states, run-plan digests):
    // the bytes travel as they are, so every rank must run the same build (the start-up agreement checks that).
    template <class T>
    void broadcast_object(T& value, int root) {
        static_assert(std::is_trivially_copyable_v<T>, "broadcast_object needs a trivially copyable type");
        broadcast_bytes(std::as_writable_bytes(std::span<T>(&value, 1)), root);
    }
    template <class T>
    std::vector<T> allgather_object(const T& mine) {
        static_assert(std::is_trivially_copyable_v<T>, "allgather_object needs a trivially copyable type");
        const std::vector<std::byte> all = allgather_bytes(std::as_bytes(std::span<const T>(&mine, 1)));
        std::vector<T> out(all.size() / sizeof(T));
        if (!out.empty()) std::memcpy(static_cast<void*>(out.data()), all.data(), out.size() * sizeof(T));
        return out;
    }
    virtual void barrier() = 0;

    // Payload bytes this rank has sent / received through this communicator (for telemetry).
    virtual uint64_t bytes_sent() const = 0;
    virtual uint64_t bytes_received() const = 0;

    // The ranks this rank is waiting for in the collective in flight ("1, 3"), where the backend can tell (the ring's
    // shared-memory path); "" otherwise. Safe to call from another thread (the stall watchdog's).
    virtual std::string waiting_for() const { return {}; }

    // Brings the whole job down with `message` printed by this rank (nothing when it is empty: the caller said it
    // already) through MPI_Abort; never returns.
    [[noreturn]] virtual void abort(const std::string& message, int exit_code) = 0;
};

// Every rank's `mine`, in rank order; lengths may differ (padded to the longest for the byte gather). Collective.
std::vector<std::string> allgather_strings(Communicator& comm, const std::string& mine);

// backend: "mpi" or "ring" (and "nccl" in CUDA builds). Requires an initialised MpiRuntime.
// Throws InputError naming the backend if it is unknown or not built.
std::unique_ptr<Communicator> make_communicator(const std::string& backend);

}  // namespace ringtrain::comm

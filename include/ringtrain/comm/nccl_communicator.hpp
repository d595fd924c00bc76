// "nccl": collectives on GPU buffers through NCCL (CUDA builds only: RINGTRAIN_WITH_CUDA).
//
// Set-up: the constructor duplicates MPI_COMM_WORLD (rank, size, node-local rank as the MPI backends), makes GPU
// (local_rank % visible devices) current, creates the ncclUniqueId on rank 0, broadcasts it over MPI and calls
// ncclCommInitRank. Collectives run on the communicator's own CUDA stream.
//
// Device-buffer collectives (allreduce_device, broadcast_device, allgather_device) are stream-ordered: they wait
// for all work already queued on the default stream (where the ops run), and the default stream waits for them, so
// an op issued afterwards sees the result; the host does not wait (call synchronize() for that).
// Asynchronous device collectives (allreduce_device_async) are for callers that order the work themselves
// (GradientSync's device path): they enqueue on stream() only, with no wait on the default stream before or after;
// the caller makes stream() wait for the producer and waits for the result with events of its own. A 16-bit wire
// format converts on the device (round to nearest even) into a caller's 2-byte buffer, reduces that with NCCL
// (ncclHalf / ncclBfloat16) and converts back; Average scales by 1/size before the conversion and sums.
// Byte counters count every device and host allreduce as a ring does (see ring_allreduce_bytes: ≈ 2(N−1)/N of the
// payload each way, with a 16-bit wire format exactly half the float32 count), broadcast and allgather as the MPI
// backends do.
// The Communicator interface (host spans) stages through pinned host buffers and a device buffer, and returns when
// the result is back on the host. Double reductions, broadcast_bytes, the uint64 allgather and barrier go over MPI.
// Errors from NCCL or CUDA throw ringtrain::Error naming the call and NCCL's or CUDA's message.
#pragma once

#include <memory>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

#ifdef RINGTRAIN_WITH_CUDA
#include <cstddef>
#include <mpi.h>

#include "ringtrain/comm/mpi_communicator.hpp"
#include "ringtrain/core/cuda_device.hpp"

namespace ringtrain::comm {

class NcclCommunicator final : public MpiCommunicatorBase {
public:
    explicit NcclCommunicator(MPI_Comm parent = MPI_COMM_WORLD);
    ~NcclCommunicator() override;

    std::string backend() const override { return "nccl"; }
    int device() const { return device_; }

    // ---- Communicator (host spans, staged through pinned memory) ----
    void allreduce(std::span<float> data, ReduceOp op = ReduceOp::Sum) override;
    using MpiCommunicatorBase::allreduce;
    void broadcast(std::span<float> data, int root) override;
    std::vector<float> allgather(std::span<const float> mine) override;
    using MpiCommunicatorBase::allgather;

    // ---- device buffers (stream-ordered, see above) ----
    void allreduce_device(float* data, size_t count, ReduceOp op = ReduceOp::Sum);
    void broadcast_device(float* data, size_t count, int root);
    // recv holds size() * count floats: every rank's `count` floats in rank order.
    void allgather_device(const float* send, float* recv, size_t count);
    // Enqueues an allreduce of `count` floats at `data` (in place) on stream() only, see above. For Float16 and
    // BFloat16, `wire_buffer` is device memory for `count` 2-byte values, used only by work on stream() (so one
    // buffer serves every call whose stream-ordered work it is); ignored for Float32.
    void allreduce_device_async(float* data, size_t count, ReduceOp op, WireFormat wire = WireFormat::Float32,
                                void* wire_buffer = nullptr);
    // Throws Error when NCCL has recorded an asynchronous error on this communicator (a peer failed, a network
    // error): for callers that poll for completion instead of waiting.
    void check_async_error();
    // Waits until every collective issued so far has finished.
    void synchronize();
    // The cudaStream_t the collectives run on (as void* so this header needs no CUDA headers).
    void* stream() const { return stream_; }

private:
    void before_collective();  // the NCCL stream waits for the default stream
    void after_collective();   // the default stream waits for the NCCL stream
    float* device_staging(size_t count);

    int device_ = 0;
    void* nccl_comm_ = nullptr;  // ncclComm_t
    void* stream_ = nullptr;     // cudaStream_t
    void* ready_ = nullptr;      // cudaEvent_t: default stream -> NCCL stream
    void* done_ = nullptr;       // cudaEvent_t: NCCL stream -> default stream
    PinnedBuffer pinned_;
    std::shared_ptr<float> dev_buf_;
    size_t dev_count_ = 0;
};

}  // namespace ringtrain::comm
#endif  // RINGTRAIN_WITH_CUDA

namespace ringtrain::comm {
// A NcclCommunicator over MPI_COMM_WORLD (requires an initialised MpiRuntime). In builds without CUDA: throws
// CollectiveInputError (every rank runs the same build and has agreed on the backend) saying that the nccl backend
// needs a CUDA build.
#ifdef RINGTRAIN_WITH_CUDA
std::unique_ptr<Communicator> make_nccl_communicator();
#else
[[noreturn]] inline std::unique_ptr<Communicator> make_nccl_communicator() {
    throw CollectiveInputError("sync.backend: nccl needs a CUDA build of ringtrain (this one has none); use mpi or ring, or "
                     "rebuild with -DRINGTRAIN_CUDA=ON where the CUDA toolkit, cuDNN and NCCL are installed");
}
#endif
}  // namespace ringtrain::comm

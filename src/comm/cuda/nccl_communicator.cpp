// NcclCommunicator (see nccl_communicator.hpp). Compiled only in CUDA builds.
#include "ringtrain/comm/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"
#include "half_cast.hpp"

namespace ringtrain::comm {

namespace {

void check_nccl(ncclResult_t r, const char* call, ncclComm_t comm = nullptr) {
    if (r == ncclSuccess) return;
    std::string msg = std::string("NCCL call ") + call + " failed: " + ncclGetErrorString(r);
    if (comm != nullptr) {
        const char* last = ncclGetLastError(comm);
        if (last != nullptr && *last != '\0') msg += std::string(" (") + last + ")";
    }
    msg += "; set NCCL_DEBUG=WARN for NCCL's own report";
    throw Error(msg);
}
#define RT_NCCL(expr) check_nccl((expr), #expr, static_cast<ncclComm_t>(nccl_comm_))

ncclRedOp_t nccl_op(ReduceOp op) {
    switch (op) {
        case ReduceOp::Sum: return ncclSum;
        case ReduceOp::Average: return ncclAvg;
        case ReduceOp::Max: return ncclMax;
        case ReduceOp::Min: return ncclMin;
    }
    return ncclSum;
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm parent) : MpiCommunicatorBase(parent) {
    // Every rank reaches the collective id broadcast below even when its device set-up failed, so a rank without a
    // GPU fails every rank with the same message instead of leaving the others waiting.
    std::string failure;
    try {
        device_ = select_cuda_device(local_rank_);
    } catch (const Error& e) {
        failure = e.what();
    }
    int ok = failure.empty() ? 1 : 0, all_ok = 0;
    check_mpi(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce(nccl device check)");
    if (!all_ok)  // every rank knows: a normal exit on each, no MPI_Abort
        throw CollectiveError("nccl backend: " + (failure.empty() ? std::string("another rank has no usable CUDA device")
                                                         : "rank " + std::to_string(rank_) + ": " + failure));
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    int id_ok = 1;
    if (rank_ == 0) id_ok = ncclGetUniqueId(&id) == ncclSuccess ? 1 : 0;
    check_mpi(MPI_Bcast(&id_ok, 1, MPI_INT, 0, comm_), "MPI_Bcast(ncclUniqueId status)");
    if (!id_ok) throw CollectiveError("NCCL call ncclGetUniqueId failed on rank 0; set NCCL_DEBUG=WARN for NCCL's own report");
    check_mpi(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm_), "MPI_Bcast(ncclUniqueId)");
    ncclComm_t comm = nullptr;
    check_nccl(ncclCommInitRank(&comm, size_, id, rank_), "ncclCommInitRank");
    nccl_comm_ = comm;
    try {
        cudaStream_t s = nullptr;
        RT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        stream_ = s;
        cudaEvent_t e1 = nullptr, e2 = nullptr;
        RT_CUDA_CHECK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
        ready_ = e1;
        RT_CUDA_CHECK(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
        done_ = e2;
    } catch (...) {
        // No destructor runs for a constructor that throws: give back what exists (this rank then ends the job,
        // cli's MPI_Abort, since the others may be past this point).
        if (ready_ != nullptr) (void)cudaEventDestroy(as_event(ready_));
        if (stream_ != nullptr) (void)cudaStreamDestroy(as_stream(stream_));
        (void)ncclCommAbort(comm);
        throw;
    }
}

NcclCommunicator::~NcclCommunicator() {
    // Unwinding after a failure (a peer died, this rank failed on its own): collectives queued on the stream may
    // never complete, and a stream sync or ncclCommFinalize would wait for them forever, before this rank reports
    // and ends the job. NCCL's call for a communicator with unfinished work is ncclCommAbort.
    if (std::uncaught_exceptions() > 0) {
        if (nccl_comm_ != nullptr) (void)ncclCommAbort(static_cast<ncclComm_t>(nccl_comm_));
        return;  // the stream and events go with the process
    }
    if (stream_ != nullptr) (void)cudaStreamSynchronize(as_stream(stream_));
    if (nccl_comm_ != nullptr) {
        (void)ncclCommFinalize(static_cast<ncclComm_t>(nccl_comm_));
        (void)ncclCommDestroy(static_cast<ncclComm_t>(nccl_comm_));
    }
    if (ready_ != nullptr) (void)cudaEventDestroy(as_event(ready_));
    if (done_ != nullptr) (void)cudaEventDestroy(as_event(done_));
    if (stream_ != nullptr) (void)cudaStreamDestroy(as_stream(stream_));
}

void NcclCommunicator::before_collective() {
    RT_CUDA_CHECK(cudaEventRecord(as_event(ready_), cudaStreamLegacy));
    RT_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream_), as_event(ready_), 0));
}

void NcclCommunicator::after_collective() {
    RT_CUDA_CHECK(cudaEventRecord(as_event(done_), as_stream(stream_)));
    RT_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, as_event(done_), 0));
}

void NcclCommunicator::synchronize() { RT_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_))); }

void NcclCommunicator::allreduce_device(float* data, size_t count, ReduceOp op) {
    if (count == 0) return;
    before_collective();
    RT_NCCL(ncclAllReduce(data, data, count, ncclFloat32, nccl_op(op), static_cast<ncclComm_t>(nccl_comm_),
                          as_stream(stream_)));
    after_collective();
    count_ring_allreduce(count, sizeof(float));
}

void NcclCommunicator::allreduce_device_async(float* data, size_t count, ReduceOp op, WireFormat wire,
                                              void* wire_buffer) {
    if (count == 0) return;
    ncclComm_t comm = static_cast<ncclComm_t>(nccl_comm_);
    if (wire == WireFormat::Float32) {
        RT_NCCL(ncclAllReduce(data, data, count, ncclFloat32, nccl_op(op), comm, as_stream(stream_)));
        count_ring_allreduce(count, sizeof(float));
        return;
    }
    if (wire_buffer == nullptr)
        throw Error(std::string("nccl allreduce_device_async: a ") + wire_format_name(wire) +
                    " wire format needs a device buffer for the 16-bit values");
    const bool bf16 = wire == WireFormat::BFloat16;
    // Average: scale by 1/N before rounding to 16 bits, then sum: every partial sum then stays within the range of
    // the values themselves, where ncclAvg would divide a 16-bit sum that may already have overflowed (fp16 ends at
    // 65504).
    const float scale = op == ReduceOp::Average ? 1.0f / static_cast<float>(size_) : 1.0f;
    const ncclRedOp_t red = op == ReduceOp::Average ? ncclSum : nccl_op(op);
    cuda_check(cuda_detail::launch_floats_to_16(data, wire_buffer, count, scale, bf16, stream_),
               bf16 ? "fp32 -> bf16 kernel launch" : "fp32 -> fp16 kernel launch");
    RT_NCCL(ncclAllReduce(wire_buffer, wire_buffer, count, bf16 ? ncclBfloat16 : ncclHalf, red, comm,
                          as_stream(stream_)));
    cuda_check(cuda_detail::launch_16_to_floats(wire_buffer, data, count, bf16, stream_),
               bf16 ? "bf16 -> fp32 kernel launch" : "fp16 -> fp32 kernel launch");
    count_ring_allreduce(count, wire_element_size(wire));
}

void NcclCommunicator::check_async_error() {
    ncclResult_t async = ncclSuccess;
    RT_NCCL(ncclCommGetAsyncError(static_cast<ncclComm_t>(nccl_comm_), &async));
    if (async != ncclSuccess && async != ncclInProgress)
        check_nccl(async, "ncclCommGetAsyncError (a collective failed)", static_cast<ncclComm_t>(nccl_comm_));
}

void NcclCommunicator::broadcast_device(float* data, size_t count, int root) {
    if (count == 0) return;
    if (root < 0 || root >= size_) throw Error("nccl broadcast: root " + std::to_string(root) + " is not a rank");
    before_collective();
    RT_NCCL(ncclBroadcast(data, data, count, ncclFloat32, root, static_cast<ncclComm_t>(nccl_comm_),
                          as_stream(stream_)));
    after_collective();
    const uint64_t bytes = count * sizeof(float);
    if (rank_ == root) count_bytes(bytes, 0);
    else count_bytes(0, bytes);
}

void NcclCommunicator::allgather_device(const float* send, float* recv, size_t count) {
    if (count == 0) return;
    before_collective();
    RT_NCCL(ncclAllGather(send, recv, count, ncclFloat32, static_cast<ncclComm_t>(nccl_comm_), as_stream(stream_)));
    after_collective();
    const uint64_t others = static_cast<uint64_t>(size_ - 1) * count * sizeof(float);
    count_bytes(others, others);
}

float* NcclCommunicator::device_staging(size_t count) {
    if (count > dev_count_) {
        dev_buf_ = allocate_floats(count, Device::CUDA);
        dev_count_ = count;
        // A new block from the caching allocator is free in default-stream order: kernels queued there may still use
        // it (a tensor freed a moment ago). The NCCL stream writes it next, so it waits for the default stream first.
        before_collective();
    }
    return dev_buf_.get();
}

void NcclCommunicator::allreduce(std::span<float> data, ReduceOp op) {
    if (data.empty()) return;
    const size_t bytes = data.size_bytes();
    pinned_.reserve(bytes);
    float* dev = device_staging(data.size());
    std::memcpy(pinned_.data(), data.data(), bytes);
    RT_CUDA_CHECK(cudaMemcpyAsync(dev, pinned_.data(), bytes, cudaMemcpyHostToDevice, as_stream(stream_)));
    RT_NCCL(ncclAllReduce(dev, dev, data.size(), ncclFloat32, nccl_op(op), static_cast<ncclComm_t>(nccl_comm_),
                          as_stream(stream_)));
    RT_CUDA_CHECK(cudaMemcpyAsync(pinned_.data(), dev, bytes, cudaMemcpyDeviceToHost, as_stream(stream_)));
    synchronize();
    std::memcpy(data.data(), pinned_.data(), bytes);
    count_ring_allreduce(data.size(), sizeof(float));
}

void NcclCommunicator::broadcast(std::span<float> data, int root) {
    if (data.empty()) return;
    if (root < 0 || root >= size_) throw Error("nccl broadcast: root " + std::to_string(root) + " is not a rank");
    const size_t bytes = data.size_bytes();
    pinned_.reserve(bytes);
    float* dev = device_staging(data.size());
    if (rank_ == root) {
        std::memcpy(pinned_.data(), data.data(), bytes);
        RT_CUDA_CHECK(cudaMemcpyAsync(dev, pinned_.data(), bytes, cudaMemcpyHostToDevice, as_stream(stream_)));
    }
    RT_NCCL(ncclBroadcast(dev, dev, data.size(), ncclFloat32, root, static_cast<ncclComm_t>(nccl_comm_),
                          as_stream(stream_)));
    if (rank_ != root)
        RT_CUDA_CHECK(cudaMemcpyAsync(pinned_.data(), dev, bytes, cudaMemcpyDeviceToHost, as_stream(stream_)));
    synchronize();
    if (rank_ != root) std::memcpy(data.data(), pinned_.data(), bytes);
    if (rank_ == root) count_bytes(bytes, 0);
    else count_bytes(0, bytes);
}

std::vector<float> NcclCommunicator::allgather(std::span<const float> mine) {
    // Counts may differ: gather them over MPI, pad every part to the largest, gather, then drop the padding.
    const std::vector<uint64_t> counts = MpiCommunicatorBase::allgather(static_cast<uint64_t>(mine.size()));
    const uint64_t most = *std::max_element(counts.begin(), counts.end());
    std::vector<float> out;
    uint64_t total = 0;
    for (uint64_t c : counts) total += c;
    out.reserve(total);
    if (most == 0) return out;
    const size_t part_bytes = most * sizeof(float);
    pinned_.reserve(part_bytes * static_cast<size_t>(size_));
    float* dev = device_staging(most * static_cast<size_t>(size_ + 1));
    float* send = dev + most * static_cast<size_t>(size_);
    std::memset(pinned_.data(), 0, part_bytes);
    if (!mine.empty()) std::memcpy(pinned_.data(), mine.data(), mine.size_bytes());
    RT_CUDA_CHECK(cudaMemcpyAsync(send, pinned_.data(), part_bytes, cudaMemcpyHostToDevice, as_stream(stream_)));
    RT_NCCL(ncclAllGather(send, dev, most, ncclFloat32, static_cast<ncclComm_t>(nccl_comm_), as_stream(stream_)));
    RT_CUDA_CHECK(cudaMemcpyAsync(pinned_.data(), dev, part_bytes * static_cast<size_t>(size_),
                                  cudaMemcpyDeviceToHost, as_stream(stream_)));
    synchronize();
    const float* all = pinned_.floats();
    for (int r = 0; r < size_; ++r) out.insert(out.end(), all + r * most, all + r * most + counts[r]);
    count_bytes((total - mine.size()) * sizeof(float), (total - mine.size()) * sizeof(float));
    return out;
}

std::unique_ptr<Communicator> make_nccl_communicator() { return std::make_unique<NcclCommunicator>(); }

}  // namespace ringtrain::comm

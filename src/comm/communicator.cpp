// make_communicator: the sync.backend names.
#include "ringtrain/comm/communicator.hpp"

#include "ringtrain/comm/launch_env.hpp"
#include "ringtrain/comm/mpi_communicator.hpp"
#include "ringtrain/comm/nccl_communicator.hpp"
#include "ringtrain/comm/ring_communicator.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm {

void Communicator::allreduce(std::span<float> data, ReduceOp op, WireFormat wire) {
    if (wire == WireFormat::Float32) return allreduce(data, op);
    throw Error("the " + backend() + " communicator has no " + wire_format_name(wire) + " compressed allreduce");
}

std::vector<std::string> communicator_backends() {
#ifdef RINGTRAIN_WITH_CUDA
    return {"ring", "mpi", "nccl"};
#else
    return {"ring", "mpi"};
#endif
}

std::unique_ptr<Communicator> make_communicator(const std::string& backend) {
    if (backend == "ring") return std::make_unique<RingCommunicator>(ring_backend_defaults());
    if (backend == "mpi") return std::make_unique<MpiCommunicator>();
    if (backend == "nccl") return make_nccl_communicator();  // InputError in builds without CUDA
    throw InputError("sync.backend '" + backend + "' is not a communicator backend; choose one of: ring, mpi, nccl (CUDA builds)");
}

}  // namespace ringtrain::comm

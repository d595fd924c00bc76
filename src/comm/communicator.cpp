// make_communicator: the sync.backend names.
#include "ringtrain/comm/communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <vector>

#include "ringtrain/comm/launch_env.hpp"
#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/comm/mpi_communicator.hpp"
#include "ringtrain/comm/nccl_communicator.hpp"
#include "ringtrain/comm/ring_communicator.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm {

void Communicator::allreduce(std::span<float> data, ReduceOp op, WireFormat wire) {
    if (wire == WireFormat::Float32) return allreduce(data, op);
    throw Error("the " + backend() + " communicator has no " + wire_format_name(wire) + " compressed allreduce");
}

std::vector<std::string> allgather_strings(Communicator& comm, const std::string& mine) {
    const std::vector<uint64_t> lengths = comm.allgather(static_cast<uint64_t>(mine.size()));
    const size_t longest = *std::max_element(lengths.begin(), lengths.end());
    std::string padded = mine;
    padded.resize(longest);
    const std::vector<std::byte> all = comm.allgather_bytes(std::as_bytes(std::span<const char>(padded)));
    std::vector<std::string> out;
    for (size_t r = 0; r < lengths.size(); ++r)
        out.emplace_back(reinterpret_cast<const char*>(all.data()) + r * longest, lengths[r]);
    return out;
}

std::vector<std::string> communicator_backends() {
#ifdef RINGTRAIN_WITH_CUDA
    return {"ring", "mpi", "nccl"};
#else
    return {"ring", "mpi"};
#endif
}

namespace {

// Every rank must make the same kind of communicator: the constructors issue backend-specific collectives (the
// ring's shared-memory set-up, NCCL's id broadcast), so ranks that picked different backends would meet in
// mismatched collectives (MPI_ERR_TRUNCATE) or hang before the trainer's start-up agreement could name the key.
// One small allgather over MPI_COMM_WORLD first; on a difference every rank throws the same error.
void require_same_backend(const std::string& backend) {
    int initialized = 0, size = 1, rank = 0;
    MPI_Initialized(&initialized);
    if (!initialized) return;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (size == 1) return;
    constexpr int kChars = 16;
    char mine[kChars] = {};
    backend.copy(mine, kChars - 1);
    std::vector<char> all(static_cast<size_t>(kChars) * static_cast<size_t>(size));
    check_mpi(MPI_Allgather(mine, kChars, MPI_CHAR, all.data(), kChars, MPI_CHAR, MPI_COMM_WORLD), "MPI_Allgather");
    const std::string first(all.data());
    for (int r = 1; r < size; ++r) {
        const std::string other(all.data() + static_cast<size_t>(r) * kChars);
        if (other != first)
            throw CollectiveInputError("ranks disagree on sync.backend: rank 0 has " + first + ", rank " +
                                       std::to_string(r) + " has " + other + "; every rank must run the same config");
    }
}

}  // namespace

std::unique_ptr<Communicator> make_communicator(const std::string& backend) {
    require_same_backend(backend);
    if (backend == "ring") return std::make_unique<RingCommunicator>(ring_backend_defaults());
    if (backend == "mpi") return std::make_unique<MpiCommunicator>();
    if (backend == "nccl") return make_nccl_communicator();  // InputError in builds without CUDA
    throw InputError("sync.backend '" + backend + "' is not a communicator backend; choose one of: ring, mpi, nccl (CUDA builds)");
}

}  // namespace ringtrain::comm

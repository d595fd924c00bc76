// make_communicator: the sync.backend names.
#include "ringtrain/comm/communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <climits>
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

namespace {
// Every rank runs the same checks on the same counts, so a mismatch throws on every rank (none waits).
size_t checked_allgatherv_total(const Communicator& comm, std::span<const float> mine, std::span<const size_t> counts,
                                std::span<float> out) {
    if (counts.size() != static_cast<size_t>(comm.size()))
        throw Error("allgatherv_into: " + std::to_string(counts.size()) + " counts for " + std::to_string(comm.size()) +
                    " ranks");
    size_t total = 0;
    for (size_t c : counts) total += c;
    if (out.size() != total || mine.size() != counts[static_cast<size_t>(comm.rank())])
        throw Error("allgatherv_into: rank " + std::to_string(comm.rank()) + " passes " + std::to_string(mine.size()) +
                    " floats into " + std::to_string(out.size()) + ", the counts say " +
                    std::to_string(counts[static_cast<size_t>(comm.rank())]) + " into " + std::to_string(total));
    return total;
}
}  // namespace

void Communicator::allgatherv_into(std::span<const float> mine, std::span<const size_t> counts, std::span<float> out) {
    checked_allgatherv_total(*this, mine, counts, out);
    const std::vector<float> all = allgather(mine);
    if (all.size() != out.size())
        throw Error("allgatherv_into: gathered " + std::to_string(all.size()) + " floats, the counts say " +
                    std::to_string(out.size()));
    std::copy(all.begin(), all.end(), out.begin());
}

void Communicator::allgatherv_into_while(std::span<const float> mine, std::span<const size_t> counts,
                                         std::span<float> out, const std::function<bool()>& /*idle*/) {
    allgatherv_into(mine, counts, out);
}

void Communicator::allreduce_while(std::span<double> data, ReduceOp op, const std::function<bool()>& /*idle*/) {
    allreduce(data, op);
}

std::vector<float> Communicator::gather(std::span<const float> mine, int root) {
    std::vector<float> all = allgather(mine);
    if (rank() != root) all.clear();
    return all;
}

size_t MpiCommunicatorBase::check_allgatherv(std::span<const float> mine, std::span<const size_t> counts,
                                             std::span<float> out) const {
    return checked_allgatherv_total(*this, mine, counts, out);
}

void MpiCommunicatorBase::allgatherv_into(std::span<const float> mine, std::span<const size_t> counts,
                                          std::span<float> out) {
    allgatherv_into_while(mine, counts, out, {});
}

void MpiCommunicatorBase::allgatherv_into_while(std::span<const float> mine, std::span<const size_t> counts,
                                                std::span<float> out, const std::function<bool()>& idle) {
    const size_t total = checked_allgatherv_total(*this, mine, counts, out);
    if (total > static_cast<size_t>(INT_MAX))
        throw Error("allgatherv_into: total of " + std::to_string(total) + " floats exceeds 2^31-1");
    std::vector<int> n(counts.size()), displs(counts.size());
    int at = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
        n[r] = static_cast<int>(counts[r]);
        displs[r] = at;
        at += n[r];
    }
    if (total > 0 && !idle) {
        check_mpi(MPI_Allgatherv(mine.data(), n[static_cast<size_t>(rank_)], MPI_FLOAT, out.data(), n.data(),
                                 displs.data(), MPI_FLOAT, comm_),
                  "MPI_Allgatherv");
    } else if (total > 0) {
        MPI_Request request = MPI_REQUEST_NULL;
        check_mpi(MPI_Iallgatherv(mine.data(), n[static_cast<size_t>(rank_)], MPI_FLOAT, out.data(), n.data(),
                                  displs.data(), MPI_FLOAT, comm_, &request),
                  "MPI_Iallgatherv");
        // MPI_Test also drives the collective's progress (Open MPI progresses non-blocking collectives inside MPI
        // calls), so idle's pieces of work stay short.
        for (int done = 0;;) {
            check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
            if (done) break;
            if (!idle()) {
                check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
                break;
            }
        }
    }
    if (size_ > 1) {
        const size_t right = counts[static_cast<size_t>((rank_ + 1) % size_)];
        count_bytes((total - right) * sizeof(float), (total - mine.size()) * sizeof(float));
    }
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

// MpiCommunicatorBase (shared collectives, counters, abort) and MpiCommunicator (MPI_Allreduce).
#include "ringtrain/comm/mpi_communicator.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "ringtrain/comm/half.hpp"
#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm {

namespace {

constexpr size_t kMaxMpiCount = static_cast<size_t>(INT_MAX);

MPI_Op mpi_op(ReduceOp op) {
    switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Average: return MPI_SUM;
        case ReduceOp::Max: return MPI_MAX;
        case ReduceOp::Min: return MPI_MIN;
    }
    return MPI_SUM;
}

template <class T>
void scale(std::span<T> data, T factor) {
    T* __restrict p = data.data();
    const size_t n = data.size();
    for (size_t i = 0; i < n; ++i) p[i] *= factor;
}

// MPI_Allreduce in place, in pieces of at most INT_MAX elements.
template <class T>
void mpi_allreduce_in_place(MPI_Comm comm, std::span<T> data, MPI_Datatype type, ReduceOp op) {
    for (size_t off = 0; off < data.size(); off += kMaxMpiCount) {
        const int n = static_cast<int>(std::min(kMaxMpiCount, data.size() - off));
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, data.data() + off, n, type, mpi_op(op), comm), "MPI_Allreduce");
    }
}

}  // namespace

ByteCount ring_allreduce_bytes(size_t count, size_t elem_size, int rank, int size) {
    if (size <= 1 || count == 0) return {};
    const size_t n = static_cast<size_t>(size);
    const size_t base = count / n, rem = count % n;
    auto seg = [&](int k) { return base + (static_cast<size_t>(((k % size) + size) % size) < rem ? 1 : 0); };
    // Sent: every segment but (r+1) in reduce-scatter, every segment but (r+2) in allgather.
    // Received: every segment but r in reduce-scatter, every segment but (r+1) in allgather.
    ByteCount b;
    b.sent = (2 * count - seg(rank + 1) - seg(rank + 2)) * elem_size;
    b.received = (2 * count - seg(rank) - seg(rank + 1)) * elem_size;
    return b;
}

MpiCommunicatorBase::MpiCommunicatorBase(MPI_Comm parent) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) throw Error("communicator created before MPI was initialised (create an MpiRuntime first)");
    check_mpi(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
    check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    MPI_Comm local = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
    check_mpi(MPI_Comm_rank(local, &local_rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(local, &local_size_), "MPI_Comm_size");
    MPI_Comm_free(&local);
}

MpiCommunicatorBase::~MpiCommunicatorBase() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicatorBase::allreduce(std::span<double> data, ReduceOp op) {
    if (data.empty()) return;
    mpi_allreduce_in_place(comm_, data, MPI_DOUBLE, op);
    if (op == ReduceOp::Average) scale(data, 1.0 / size_);
    count_ring_allreduce(data.size(), sizeof(double));
}

void MpiCommunicatorBase::allreduce_while(std::span<double> data, ReduceOp op, const std::function<bool()>& idle) {
    if (!idle || size_ == 1 || data.size() > kMaxMpiCount) {
        allreduce(data, op);
        return;
    }
    if (data.empty()) return;
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_DOUBLE, mpi_op(op), comm_,
                             &request),
              "MPI_Iallreduce");
    for (int done = 0;;) {  // MPI_Test also progresses the collective (see allgatherv_into_while)
        check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done) break;
        if (!idle()) {
            check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
            break;
        }
    }
    if (op == ReduceOp::Average) scale(data, 1.0 / size_);
    count_ring_allreduce(data.size(), sizeof(double));
}

void MpiCommunicatorBase::broadcast(std::span<float> data, int root) {
    broadcast_bytes(std::as_writable_bytes(data), root);
}

void MpiCommunicatorBase::broadcast_bytes(std::span<std::byte> data, int root) {
    if (root < 0 || root >= size_)
        throw Error("broadcast: root " + std::to_string(root) + " is not a rank (world size " + std::to_string(size_) + ")");
    if (data.empty() || size_ == 1) return;
    for (size_t off = 0; off < data.size(); off += kMaxMpiCount) {
        const int n = static_cast<int>(std::min(kMaxMpiCount, data.size() - off));
        check_mpi(MPI_Bcast(data.data() + off, n, MPI_BYTE, root, comm_), "MPI_Bcast");
    }
    if (rank_ == root) count_bytes(data.size(), 0);
    else count_bytes(0, data.size());
}

std::vector<float> MpiCommunicatorBase::allgather(std::span<const float> mine) {
    if (mine.size() > kMaxMpiCount) throw Error("allgather: " + std::to_string(mine.size()) + " floats on one rank exceeds 2^31-1");
    const int my_count = static_cast<int>(mine.size());
    std::vector<int> counts(size_), displs(size_);
    check_mpi(MPI_Allgather(&my_count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_), "MPI_Allgather");
    size_t total = 0;
    for (int k = 0; k < size_; ++k) {
        if (total > kMaxMpiCount) throw Error("allgather: total of " + std::to_string(total) + "+ floats exceeds 2^31-1");
        displs[k] = static_cast<int>(total);
        total += static_cast<size_t>(counts[k]);
    }
    if (total > kMaxMpiCount) throw Error("allgather: total of " + std::to_string(total) + " floats exceeds 2^31-1");
    std::vector<float> out(total);
    if (total > 0)
        check_mpi(MPI_Allgatherv(mine.data(), my_count, MPI_FLOAT, out.data(), counts.data(), displs.data(), MPI_FLOAT, comm_),
                  "MPI_Allgatherv");
    if (size_ > 1) {
        const size_t right = static_cast<size_t>(counts[(rank_ + 1) % size_]);
        count_bytes((total - right) * sizeof(float), (total - mine.size()) * sizeof(float));
    }
    return out;
}

std::vector<float> MpiCommunicatorBase::gather(std::span<const float> mine, int root) {
    if (root < 0 || root >= size_) throw Error("gather: root " + std::to_string(root) + " is not a rank of " + std::to_string(size_));
    if (mine.size() > kMaxMpiCount) throw Error("gather: " + std::to_string(mine.size()) + " floats on one rank exceeds 2^31-1");
    const int my_count = static_cast<int>(mine.size());
    // The counts go to every rank (N ints), so a total past the MPI count is refused on every rank alike.
    std::vector<int> counts(size_), displs(size_);
    check_mpi(MPI_Allgather(&my_count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_), "MPI_Allgather");
    size_t total = 0;
    for (int k = 0; k < size_; ++k) {
        if (total > kMaxMpiCount) break;
        displs[k] = static_cast<int>(total);
        total += static_cast<size_t>(counts[k]);
    }
    if (total > kMaxMpiCount) throw Error("gather: total of " + std::to_string(total) + "+ floats exceeds 2^31-1");
    if (rank_ != root) total = 0;
    std::vector<float> out(total);
    check_mpi(MPI_Gatherv(mine.data(), my_count, MPI_FLOAT, out.data(), counts.data(), displs.data(), MPI_FLOAT, root,
                          comm_),
              "MPI_Gatherv");
    if (size_ > 1) {
        if (rank_ == root) count_bytes(0, (total - mine.size()) * sizeof(float));
        else count_bytes(mine.size() * sizeof(float), 0);
    }
    return out;
}

std::vector<uint64_t> MpiCommunicatorBase::allgather(uint64_t mine) {
    std::vector<uint64_t> out(size_);
    check_mpi(MPI_Allgather(&mine, 1, MPI_UINT64_T, out.data(), 1, MPI_UINT64_T, comm_), "MPI_Allgather");
    if (size_ > 1) count_bytes((size_ - 1) * sizeof(uint64_t), (size_ - 1) * sizeof(uint64_t));
    return out;
}

std::vector<std::byte> MpiCommunicatorBase::allgather_bytes(std::span<const std::byte> mine) {
    // The counts are compared first: MPI_Allgather with counts that differ between ranks is undefined (a truncation
    // error at best, a hang at worst).
    const std::vector<uint64_t> counts = allgather(static_cast<uint64_t>(mine.size()));
    for (int k = 0; k < size_; ++k)
        if (counts[k] != mine.size())
            throw Error("allgather_bytes: rank " + std::to_string(k) + " contributes " + std::to_string(counts[k]) +
                        " bytes, rank " + std::to_string(rank_) + " " + std::to_string(mine.size()) +
                        "; every rank must pass the same count");
    if (mine.size() > kMaxMpiCount) throw Error("allgather_bytes: " + std::to_string(mine.size()) + " bytes on one rank exceeds 2^31-1");
    std::vector<std::byte> out(mine.size() * static_cast<size_t>(size_));
    if (!mine.empty())
        check_mpi(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, out.data(),
                                static_cast<int>(mine.size()), MPI_BYTE, comm_),
                  "MPI_Allgather");
    if (size_ > 1) count_bytes((size_ - 1) * mine.size(), (size_ - 1) * mine.size());
    return out;
}

void MpiCommunicatorBase::barrier() { check_mpi(MPI_Barrier(comm_), "MPI_Barrier"); }

void MpiCommunicatorBase::abort(const std::string& message, int exit_code) {
    // The documented error format (docs/run-output.md): a grep for "ringtrain: error:" in a job log finds it.
    if (!message.empty()) std::fprintf(stderr, "ringtrain: error: rank %d: %s\n", rank_, message.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort should not return; make sure we never do
}

namespace {

int op_index(ReduceOp op) { return op == ReduceOp::Max ? 1 : op == ReduceOp::Min ? 2 : 0; }

// MPI user function: inout[i] = encode(decode(in[i]) ∘ decode(inout[i])) with ∘ in float32. Commutative because
// a+b, max(a,b), min(a,b) are (NaN aside for max/min).
template <WireFormat W, int Op>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
    constexpr size_t kBlock = 512;
    alignas(64) float a[kBlock];
    alignas(64) float b[kBlock];
    const auto* x = static_cast<const uint16_t*>(in);
    auto* y = static_cast<uint16_t*>(inout);
    const size_t n = static_cast<size_t>(*len);
    for (size_t off = 0; off < n; off += kBlock) {
        const size_t m = std::min(kBlock, n - off);
        decode16(W, x + off, a, m);
        decode16(W, y + off, b, m);
        for (size_t i = 0; i < m; ++i) {
            if constexpr (Op == 0) b[i] = a[i] + b[i];
            else if constexpr (Op == 1) b[i] = b[i] > a[i] ? b[i] : a[i];
            else b[i] = b[i] < a[i] ? b[i] : a[i];
        }
        encode16(W, b, y + off, m);
    }
}

using UserFn = void (*)(void*, void*, int*, MPI_Datatype*);
constexpr UserFn kReduce16[2][3] = {
    {reduce16<WireFormat::Float16, 0>, reduce16<WireFormat::Float16, 1>, reduce16<WireFormat::Float16, 2>},
    {reduce16<WireFormat::BFloat16, 0>, reduce16<WireFormat::BFloat16, 1>, reduce16<WireFormat::BFloat16, 2>},
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm parent) : MpiCommunicatorBase(parent) {
    check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &type16_), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&type16_), "MPI_Type_commit");
    for (int f = 0; f < 2; ++f)
        for (int o = 0; o < 3; ++o) check_mpi(MPI_Op_create(kReduce16[f][o], 1, &ops16_[f][o]), "MPI_Op_create");
}

MpiCommunicator::~MpiCommunicator() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (auto& row : ops16_)
        for (MPI_Op& op : row)
            if (op != MPI_OP_NULL) MPI_Op_free(&op);
    if (type16_ != MPI_DATATYPE_NULL) MPI_Type_free(&type16_);
}

void MpiCommunicator::allreduce(std::span<float> data, ReduceOp op, WireFormat wire) {
    if (wire == WireFormat::Float32) return allreduce(data, op);
    if (data.empty() || size_ == 1) return;  // nothing to send: the values stay exact
    const size_t count = data.size();
    if (wire16_.size() < count) wire16_.resize(count);
    uint16_t* w = wire16_.data();
    encode16(wire, data.data(), w, count);
    const MPI_Op mop = ops16_[wire == WireFormat::Float16 ? 0 : 1][op_index(op)];
    for (size_t off = 0; off < count; off += kMaxMpiCount) {
        const int n = static_cast<int>(std::min(kMaxMpiCount, count - off));
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, w + off, n, type16_, mop, comm_), "MPI_Allreduce");
    }
    decode16(wire, w, data.data(), count);
    if (op == ReduceOp::Average) scale(data, 1.0f / static_cast<float>(size_));
    count_ring_allreduce(count, 2);
}

void MpiCommunicator::allreduce(std::span<float> data, ReduceOp op) {
    if (data.empty()) return;
    if (size_ > 1) mpi_allreduce_in_place(comm_, data, MPI_FLOAT, op);
    if (op == ReduceOp::Average && size_ > 1) scale(data, 1.0f / static_cast<float>(size_));
    count_ring_allreduce(data.size(), sizeof(float));
}

}  // namespace ringtrain::comm

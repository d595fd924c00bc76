#include "ringtrain/sync/consistency.hpp"

#include <algorithm>
#include <cstring>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"

namespace ringtrain::sync {

namespace {
void fnv(uint64_t& h, const void* data, size_t n) { h = fnv1a(data, n, h); }

uint64_t describe_hash(const nn::Parameter& p) {
    uint64_t h = kFnv1aOffsetBasis;
    fnv(h, p.name.data(), p.name.size());
    for (int64_t d : p.value.shape()) fnv(h, &d, sizeof d);
    return h;
}

std::string describe(const nn::Parameter& p) { return "'" + p.name + "' " + shape_string(p.value.shape()); }

// Rank `root`'s text, on every rank.
std::string broadcast_string(comm::Communicator& comm, std::string s, int root) {
    uint64_t len = s.size();
    comm.broadcast_bytes(std::as_writable_bytes(std::span<uint64_t>(&len, 1)), root);
    s.resize(len);
    comm.broadcast_bytes(std::as_writable_bytes(std::span<char>(s.data(), s.size())), root);
    return s;
}
}  // namespace

uint64_t parameter_layout_hash(const std::vector<nn::Parameter*>& params) {
    uint64_t h = kFnv1aOffsetBasis;
    for (const auto* p : params) {
        const uint64_t d = describe_hash(*p);
        fnv(h, &d, sizeof d);
    }
    return h;
}

void verify_same_parameters(comm::Communicator& comm, const std::vector<nn::Parameter*>& params) {
    const auto all = comm.allgather(parameter_layout_hash(params));
    bool same = true;
    for (uint64_t h : all) same = same && h == all[0];
    if (same) return;

    // Find the first index where some rank differs from rank 0; every rank runs the same loop.
    const auto counts = comm.allgather(static_cast<uint64_t>(params.size()));
    uint64_t max_count = 0;
    for (uint64_t c : counts) max_count = std::max(max_count, c);
    for (uint64_t i = 0; i < max_count; ++i) {
        const uint64_t mine = i < params.size() ? describe_hash(*params[i]) : 0;
        const auto hs = comm.allgather(mine);
        int odd = -1;
        for (size_t r = 1; r < hs.size(); ++r)
            if (hs[r] != hs[0]) {
                odd = static_cast<int>(r);
                break;
            }
        if (odd < 0) continue;
        const std::string here = i < params.size() ? describe(*params[i]) : "(none)";
        const std::string at0 = broadcast_string(comm, here, 0);
        const std::string atodd = broadcast_string(comm, here, odd);
        throw CollectiveInputError("the ranks build different models: parameter #" + std::to_string(i) + " is " + at0 +
                         " on rank 0 but " + atodd + " on rank " + std::to_string(odd) +
                         "; every rank must run the same model file and config");
    }
    throw CollectiveInputError("the ranks build different models (parameter list hashes differ); every rank must run the "
                     "same model file and config");
}

void broadcast_from_root(comm::Communicator& comm, const std::vector<nn::Parameter*>& params,
                         const std::vector<std::pair<std::string, Tensor*>>& state) {
    if (comm.size() == 1) return;
    // MPI sees host memory only: device tensors go through a host copy.
    auto broadcast = [&](Tensor& t) {
        if (t.device() == Device::CPU) {
            comm.broadcast(t.span(), 0);
            return;
        }
        Tensor host = t.to(Device::CPU);
        comm.broadcast(host.span(), 0);
        t.copy_from(host);
    };
    for (auto* p : params) broadcast(p->value);
    for (const auto& [name, t] : state) broadcast(*t);
}

void run_then_agree(comm::Communicator& comm, const std::function<void()>& local_work) {
    std::exception_ptr error;
    double code = 0;
    try {
        local_work();
    } catch (const InputError&) {
        error = std::current_exception();
        code = 2;
    } catch (...) {
        error = std::current_exception();
        code = 1;
    }
    double worst = code;
    comm.allreduce(std::span<double>(&worst, 1), comm::ReduceOp::Max);
    if (error) std::rethrow_exception(error);
    if (worst > 0)
        throw PeerFailure("another rank failed during set-up (its message says why)", static_cast<int>(worst));
}

uint64_t parameter_value_hash(const std::vector<nn::Parameter*>& params) {
    uint64_t h = kFnv1aOffsetBasis;
    for (const auto* p : params) {
        const Tensor host = p->value.to(Device::CPU);
        fnv(h, host.data(), host.numel() * sizeof(float));
    }
    return h;
}

}  // namespace ringtrain::sync

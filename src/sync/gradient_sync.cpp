#include "ringtrain/sync/gradient_sync.hpp"

#include <cstring>

namespace ringtrain::sync {

GradientSync::GradientSync(comm::Communicator& comm, std::vector<nn::Parameter*> params)
    : comm_(comm), params_(std::move(params)) {
    size_t total = 0;
    for (auto* p : params_) total += static_cast<size_t>(p->grad.numel());
    buffer_.resize(total);
}

void GradientSync::synchronize() {
    if (comm_.size() == 1) return;
    size_t off = 0;
    for (auto* p : params_) {
        std::memcpy(buffer_.data() + off, p->grad.data(), p->grad.numel() * sizeof(float));
        off += p->grad.numel();
    }
    comm_.allreduce(std::span<float>(buffer_), comm::ReduceOp::Average);
    off = 0;
    for (auto* p : params_) {
        std::memcpy(p->grad.data(), buffer_.data() + off, p->grad.numel() * sizeof(float));
        off += p->grad.numel();
    }
}

}  // namespace ringtrain::sync

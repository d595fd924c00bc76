// ParameterAverager (see the header).
#include "ringtrain/sync/parameter_averager.hpp"

#include <algorithm>
#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"

namespace ringtrain::sync {

ParameterAverager::ParameterAverager(comm::Communicator& comm, std::vector<nn::Parameter*> params, size_t fusion_bytes)
    : comm_(comm), params_(std::move(params)) {
    size_t group_bytes = 0, largest = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
        if (!params_[i]) throw Error("ParameterAverager: parameter #" + std::to_string(i) + " is null");
        const size_t bytes = static_cast<size_t>(params_[i]->value.numel()) * sizeof(float);
        const bool fits = !groups_.empty() && fusion_bytes > 0 && group_bytes + bytes <= fusion_bytes;
        if (!fits) {
            groups_.emplace_back();
            group_bytes = 0;
        }
        groups_.back().push_back(i);
        group_bytes += bytes;
        if (groups_.back().size() > 1) largest = std::max(largest, group_bytes / sizeof(float));
    }
    if (comm_.size() > 1) buffer_.resize(largest);  // single-tensor groups are reduced in place
}

void ParameterAverager::average() {
    if (comm_.size() == 1) return;
    std::vector<Tensor*> values;
    for (nn::Parameter* p : params_) values.push_back(&p->value);
    collectives_ += average_values(values);
}

std::vector<Tensor> ParameterAverager::averaged_copies(bool ranks_agree) {
    std::vector<Tensor> copies;
    copies.reserve(params_.size());
    for (const nn::Parameter* p : params_) {
        copies.emplace_back(p->value.shape());
        copies.back().copy_from(p->value);
    }
    if (comm_.size() == 1 || ranks_agree) return copies;
    std::vector<Tensor*> values;
    for (Tensor& c : copies) values.push_back(&c);
    average_values(values);  // not counted: collectives() is per average() (the run's prediction divides by those)
    return copies;
}

uint64_t ParameterAverager::average_values(const std::vector<Tensor*>& values) {
    uint64_t collectives = 0;
    for (const auto& g : groups_) {
        // A lone CPU tensor is reduced in place; device tensors are staged through host memory (MPI sees host only).
        if (g.size() == 1 && values[g[0]]->device() == Device::CPU) {
            comm_.allreduce(values[g[0]]->span(), comm::ReduceOp::Average);
            ++collectives;
            continue;
        }
        size_t need = 0;
        for (size_t i : g) need += static_cast<size_t>(values[i]->numel());
        if (buffer_.size() < need) buffer_.resize(need);
        size_t off = 0;
        for (size_t i : g) {
            const Tensor& v = *values[i];
            copy_floats(buffer_.data() + off, Device::CPU, v.data(), v.device(), static_cast<size_t>(v.numel()));
            off += static_cast<size_t>(v.numel());
        }
        comm_.allreduce(std::span<float>(buffer_.data(), off), comm::ReduceOp::Average);
        ++collectives;
        off = 0;
        for (size_t i : g) {
            Tensor& v = *values[i];
            copy_floats(v.data(), v.device(), buffer_.data() + off, Device::CPU, static_cast<size_t>(v.numel()));
            off += static_cast<size_t>(v.numel());
        }
    }
    return collectives;
}

}  // namespace ringtrain::sync

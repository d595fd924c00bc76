// ParameterAverager: local SGD's averaging of parameter values across ranks (each rank steps on its own gradients
// and, every H steps, calls average()), and the same average computed aside for a checkpoint (averaged_copies()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/tensor.hpp"
#include "ringtrain/nn/layer.hpp"

namespace ringtrain::sync {

// Packs the values into fusion buffers of up to `fusion_bytes` in parameter order and runs one allreduce(Average) per
// buffer on the calling thread, over `comm` (borrowed; used on the calling thread only). A tensor larger than the
// buffer is reduced in place. Float32 only: parameter values are never rounded to 16 bits. A no-op on one rank.
// Collective.
class ParameterAverager {
public:
    ParameterAverager(comm::Communicator& comm, std::vector<nn::Parameter*> params, size_t fusion_bytes = 64u << 20);
    void average();
    // The ranks' average of every parameter, as host tensors in parameter order, with the parameters left as they
    // are: a local SGD checkpoint saves the average, but an average the schedule does not make would change what the
    // ranks train on from there. The same groups and collectives as average(), so the same bits. Collective unless
    // `ranks_agree` (every rank passes the same: the parameters were just averaged, so they are copied as they are).
    std::vector<Tensor> averaged_copies(bool ranks_agree = false);
    uint64_t collectives() const { return collectives_; }

private:
    // average()'s work on `values` (the parameters' own, or host copies of them: same shapes, same order); returns
    // the collectives it made.
    uint64_t average_values(const std::vector<Tensor*>& values);

    comm::Communicator& comm_;
    std::vector<nn::Parameter*> params_;
    std::vector<std::vector<size_t>> groups_;  // parameter indices packed together
    std::vector<float> buffer_;
    uint64_t collectives_ = 0;
};

}  // namespace ringtrain::sync

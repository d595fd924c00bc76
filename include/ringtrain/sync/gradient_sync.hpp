// GradientSync: averages every parameter gradient across ranks after backward, so each rank applies the
// same update. This first version packs all gradients into one preallocated buffer and runs one allreduce;
// fusion thresholds, overlap with backward and compression build on this seam.
#pragma once

#include <cstdint>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/nn/layer.hpp"

namespace ringtrain::sync {

class GradientSync {
public:
    GradientSync(comm::Communicator& comm, std::vector<nn::Parameter*> params);
    // Called by backward as each gradient becomes final (last layer first); a no-op hook for now.
    void on_gradient_ready(nn::Parameter& p) {}
    // Replaces every gradient with its average over all ranks. A no-op on one rank.
    void synchronize();

private:
    comm::Communicator& comm_;
    std::vector<nn::Parameter*> params_;
    std::vector<float> buffer_;  // fused gradients, allocated once
};

}  // namespace ringtrain::sync

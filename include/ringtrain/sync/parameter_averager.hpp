// ParameterAverager: local SGD's averaging of parameter values across ranks (each rank steps on its own gradients
// and, every H steps, calls average()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
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
    uint64_t collectives() const { return collectives_; }

private:
    comm::Communicator& comm_;
    std::vector<nn::Parameter*> params_;
    std::vector<std::vector<size_t>> groups_;  // parameter indices packed together
    std::vector<float> buffer_;
    uint64_t collectives_ = 0;
};

}  // namespace ringtrain::sync

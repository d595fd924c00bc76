// BatchStatsReducer: how a synchronised BatchNorm sums its batch statistics over the ranks, without nn knowing about
// communicators (the layer graph has nn below sync). The trainer sets one on the model (Model::
// set_batch_stats_reducer) when sync.batchnorm is on; sync::CommBatchStatsReducer implements it over a Communicator.
#pragma once

#include <span>

namespace ringtrain::nn {

class BatchStatsReducer {
public:
    virtual ~BatchStatsReducer() = default;
    // Replaces `values` by their element-wise sum over every rank. Blocking; called on the training thread by every
    // rank at the same point of forward/backward with the same length.
    virtual void sum(std::span<double> values) = 0;
};

}  // namespace ringtrain::nn

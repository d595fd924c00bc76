// Start-up agreement between ranks: the same parameter list everywhere (checked by hash, the first mismatch
// named on every rank instead of a hang), and rank 0's parameters and optimizer state copied to all.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/nn/layer.hpp"

namespace ringtrain::sync {

// Hash of parameter names and shapes, in order.
uint64_t parameter_layout_hash(const std::vector<nn::Parameter*>& params);

// Throws InputError on every rank when any rank's parameter list differs, naming the first differing
// parameter and the ranks involved. Collective: every rank must call it.
void verify_same_parameters(comm::Communicator& comm, const std::vector<nn::Parameter*>& params);

// Copies rank 0's parameter values and the given state tensors to every rank. Collective.
void broadcast_from_root(comm::Communicator& comm, const std::vector<nn::Parameter*>& params,
                         const std::vector<std::pair<std::string, Tensor*>>& state);

// Runs `local_work` (no collectives inside) on every rank, then agrees on the outcome with one allreduce:
// if any rank failed, failing ranks rethrow their own error and the others throw PeerFailure carrying the
// worst exit code (2 for bad input, 1 otherwise). So a rank that cannot read its data never leaves the
// others waiting in the next collective.
void run_then_agree(comm::Communicator& comm, const std::function<void()>& local_work);

// FNV-1a hash of the bytes of every parameter value (to check ranks hold identical parameters).
uint64_t parameter_value_hash(const std::vector<nn::Parameter*>& params);

}  // namespace ringtrain::sync

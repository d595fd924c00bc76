// Start-up agreement between ranks: every rank holds the same run (config, model, data shape, parameter list,
// bucket layout; compared as Facts, the first difference named on every rank instead of a hang or a silently
// wrong model), and rank 0's parameters and optimizer state copied to all.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/nn/layer.hpp"

namespace ringtrain::sync {

// One thing every rank must hold the same: a key (a config key, or what it names, e.g. "model parameter #2") and
// its value as text, as a message shows it.
struct Fact {
    std::string key, value;
    bool operator==(const Fact&) const = default;
};
using Facts = std::vector<Fact>;

// Appends the leaves of `doc` under `prefix`: object members as "prefix.key", elements of arrays that hold objects
// or arrays as "prefix[i]"; scalars and arrays of scalars are values (their JSON text, strings without quotes).
void append_json_facts(const nlohmann::json& doc, const std::string& prefix, Facts& out);
// "model parameters" (the count), then "model parameter #i" = "'name' [shape]" for each, in order.
void append_parameter_facts(const std::vector<nn::Parameter*>& params, Facts& out);

// The first key (rank 0's order, then keys only other ranks have) whose value is not the same on every rank, as
// "ranks disagree on K: rank 0 has A, rank 1 has B" (ranks with one value grouped: "ranks 0-2, 5 have A");
// nullopt when every rank holds the same facts.
std::optional<std::string> first_disagreement(const std::vector<Facts>& per_rank);

// Collective. One allgather of a digest of `mine`; only when the digests differ are the facts themselves exchanged,
// and every rank throws the same CollectiveInputError naming the first differing key and the ranks' values.
void require_same_facts(comm::Communicator& comm, const Facts& mine);

// Copies rank 0's parameter values and the given state tensors to every rank. Collective.
void broadcast_from_root(comm::Communicator& comm, const std::vector<nn::Parameter*>& params,
                         const std::vector<std::pair<std::string, Tensor*>>& state);

// Local SGD checkpoints (each rank's own parameters and optimizer state): every rank's values of `tensors` gathered to
// rank 0, one collective per tensor. On rank 0, element i holds rank 0's values of tensors[i], then rank 1's, and so
// on; elsewhere it is empty. Device tensors travel through host copies. Collective.
std::vector<std::vector<float>> gather_to_root(comm::Communicator& comm, const std::vector<Tensor*>& tensors);
// The way back, on resume: rank r's part of values[i] (rank 0's argument, laid out as gather_to_root returns it;
// ignored on the other ranks) into its own tensors[i]. One broadcast per tensor and rank other than 0. Collective.
void scatter_from_root(comm::Communicator& comm, const std::vector<std::vector<float>>& values,
                       const std::vector<Tensor*>& tensors);

// Hash of parameter names and shapes, in order (stored in checkpoints: a checkpoint of another model is refused).
uint64_t parameter_layout_hash(const std::vector<nn::Parameter*>& params);

// Runs `local_work` (no collectives inside) on every rank, then agrees on the outcome with one allreduce:
// if any rank failed, failing ranks rethrow their own message as a CollectiveInputError (bad input) or
// CollectiveError, and the others throw PeerFailure carrying the worst exit code (2 for bad input, 1 otherwise).
// So a rank that cannot read its data never leaves the others waiting in the next collective, and every rank
// can leave normally (no MPI_Abort).
void run_then_agree(comm::Communicator& comm, const std::function<void()>& local_work);

// FNV-1a hash of the bytes of every parameter value (to check ranks hold identical parameters).
uint64_t parameter_value_hash(const std::vector<nn::Parameter*>& params);

}  // namespace ringtrain::sync

// Checkpoints: parameters, optimizer state, loop position and every rank's RNG state in one binary file
// (a JSON header, then raw float32 tensors), written to a temporary name and renamed, so a crash never
// leaves a half-written checkpoint where resume would find it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/core/rng.hpp"
#include "ringtrain/nn/layer.hpp"
#include "ringtrain/optim/optimizer.hpp"

namespace ringtrain::train {

struct LoopState {
    int64_t epoch = 0;          // epoch to continue in
    int64_t step_in_epoch = 0;  // first step still to run in that epoch
    int64_t global_step = 0;    // steps run so far in all
    double epoch_loss_sum = 0;  // running training-loss sums of the current epoch (all ranks)
    double epoch_samples = 0;
    std::vector<Rng::State> rng_states;  // one per rank, for dropout
    nlohmann::json extra;                // anything else worth recording (config, world size)
};

void save_checkpoint(const std::string& path, const std::vector<nn::Parameter*>& params, optim::Optimizer* opt,
                     const LoopState& state);

// Restores into `params` and (when given) the optimizer; names and shapes must match, else InputError.
LoopState load_checkpoint(const std::string& path, const std::vector<nn::Parameter*>& params,
                          optim::Optimizer* opt);

// Checkpoint folder management: "ckpt-<global step>.bin" files plus a "latest" pointer.
std::string checkpoint_file_name(int64_t global_step);
// Writes `latest` (atomically) and deletes all but the newest `keep` checkpoints.
void publish_checkpoint(const std::string& dir, const std::string& file_name, int64_t keep);
// The path named by dir/latest, or "" when there is none.
std::string latest_checkpoint(const std::string& dir);

}  // namespace ringtrain::train

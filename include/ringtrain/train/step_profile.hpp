// StepProfile: one rank's training step measured in-process — per phase, per layer, and when each gradient became
// final in backward (what the cycle-time bucketing times, and what the scaling predictor overlaps the allreduces
// with). The run's own data, model, optimizer and device, on a communicator of this rank alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/train/config.hpp"

namespace ringtrain::train {

struct StepProfile {
    int64_t batch_size = 0;  // per rank
    int steps = 0;           // measured (after the warm-up steps)
    std::string device;      // "cpu", or the GPU's name
    // Medians over the measured steps, seconds.
    double input_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
    // Each measured step's local work (input + forward + backward + optimizer) as sorted quantiles, one a step up to
    // 1001: how much the steps vary, for the wait for the slowest of N ranks (predict/straggler_estimate.hpp).
    std::vector<double> work_quantiles;
    struct Gradient {
        std::string name;
        size_t floats = 0;
        double ready_s = -1;  // median time after backward began that the gradient was final (< 0: never reported)
    };
    std::vector<Gradient> gradients;  // parameter order
    struct Layer {
        std::string name;
        double forward_s = 0, backward_s = 0;  // medians
    };
    std::vector<Layer> layers;
};

// Runs `warmup` + at least `steps` training steps of `config` (more, up to 5000, until the measured ones took
// `min_seconds`) on this process alone (no collectives; any other ranks of the
// job are not involved) and times them. Throws InputError as the Trainer would for a bad config or data.
StepProfile profile_steps(const Config& config, int warmup, int steps, double min_seconds = 0);

}  // namespace ringtrain::train

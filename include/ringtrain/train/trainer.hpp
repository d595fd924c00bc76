// Trainer: one rank of a data-parallel job — load, forward, loss, backward, gradient averaging, optimizer step —
// plus evaluation, checkpoints, resume, metrics and the run summary, all as the config's run plan says.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/train/config.hpp"

namespace ringtrain::train {

namespace detail {
struct TrainerParts;
}

// What a Trainer is built for. Evaluate reads the training split only for its classes and shape (an image folder's
// training files are not decoded to find bad ones: `ringtrain eval` of an ImageNet config must not decode 1.28 M
// JPEGs before it evaluates 50 k).
enum class TrainerUse { Train, Evaluate };

class Trainer {
public:
    // Builds data, model and optimizer on every rank, checks that the ranks agree on the model, and starts
    // every rank from rank 0's parameters. Collective.
    Trainer(const Config& config, comm::Communicator& comm, TrainerUse use = TrainerUse::Train);
    ~Trainer();
    Trainer(const Trainer&) = delete;
    Trainer& operator=(const Trainer&) = delete;

    // Trains as configured (resuming if asked) and returns the run summary (also written by rank 0). Collective. A
    // run that throws still writes this rank's timeline (output.timeline), ending in a "failed" event, then rethrows.
    nlohmann::json train();
    // Loads `checkpoint` and evaluates on the test set; returns {test_accuracy, test_loss, samples}. Collective.
    nlohmann::json evaluate_checkpoint(const std::string& checkpoint);

    // Called on this rank after each training step (its work around the step done), with the global step: a hook for
    // tests (a signal at a chosen step) and for embedding programs.
    void set_step_callback(std::function<void(int64_t global_step)> callback);
    // The process exits when train() returns (the command line): after a stop signal the handlers then stay, so a
    // second signal while the summary is written still ends it with exit 4 and its line (StopRequest, AfterStop).
    void set_process_exits_after_train(bool yes);

    // FNV hash of this rank's current parameter values.
    uint64_t parameter_hash() const;
    // Flat copy of this rank's parameter values.
    std::vector<float> parameters_flat() const;

private:
    void require_same_checkpoint_values(const std::string& checkpoint);
    nlohmann::json train_loop();
    void write_timeline_after_failure(const std::string& what) const noexcept;

    std::unique_ptr<detail::TrainerParts> parts_;
    std::function<void(int64_t)> step_callback_;
};

}  // namespace ringtrain::train

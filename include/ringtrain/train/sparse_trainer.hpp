// SparseTrainer: one rank of a data-parallel job on click-log data (data.format libsvm or criteo) — a model of one
// sparse_linear layer over hashed features, trained on sparse gradients: each step touches only the rows its batch
// names, the ranks combine their rows with sync::SparseGradientSync, and a sparse optimizer (sgd, adagrad, ftrl)
// updates only those rows. Its own path, beside the dense Trainer: nothing here is a dense tensor of gradients.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/train/config.hpp"
#include "ringtrain/train/stop_request.hpp"

namespace ringtrain::train {

namespace detail {
class SparseRun;
}

// Whether `config` runs on the sparse path (data.format libsvm or criteo). For the other formats it checks that the
// model file holds no sparse_linear layer (InputError naming the file otherwise). Collective: every rank leaves
// with the same answer or the same error.
bool uses_sparse_path(const Config& config, comm::Communicator& comm);

class SparseTrainer {
public:
    // Opens the readers, builds the model and optimizer, checks that every rank runs the same plan on the same
    // data and model, and starts every rank from rank 0's parameters. Collective.
    SparseTrainer(const Config& config, comm::Communicator& comm);
    ~SparseTrainer();
    SparseTrainer(const SparseTrainer&) = delete;
    SparseTrainer& operator=(const SparseTrainer&) = delete;

    // Trains as configured (resuming if asked); returns the run summary (rank 0 also writes it). Collective.
    // SIGTERM, SIGINT and train.stop_signal stop it at the next step boundary on every rank, with a checkpoint and
    // summary["stopped"] (StopRequest); checkpoint.resume=auto then continues bit for bit.
    nlohmann::json train();
    // Called on every rank after each step with the global step (tests: a signal at a known step).
    void set_step_callback(std::function<void(int64_t global_step)> callback);
    // The process exits when train() returns (the command line): after a stop signal the handlers then stay, so a
    // second signal while the summary is written still ends it with exit 4 and its line (StopRequest, AfterStop).
    void set_process_exits_after_train(bool yes) {
        after_stop_ = yes ? AfterStop::KeepHandlers : AfterStop::RestoreHandlers;
    }
    // Loads `checkpoint` and evaluates on the test file: {test_accuracy, test_loss, test_logloss, test_auc,
    // samples}. Collective.
    nlohmann::json evaluate_checkpoint(const std::string& checkpoint);

    // Flat copy of this rank's weights (the table, row-major, then the bias).
    std::vector<float> parameters_flat() const;

private:
    std::unique_ptr<detail::SparseRun> run_;
    std::function<void(int64_t)> step_callback_;
    AfterStop after_stop_ = AfterStop::RestoreHandlers;
};

}  // namespace ringtrain::train

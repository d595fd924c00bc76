// Trainer: the epoch and step loop of one rank of a data-parallel job — load, forward, loss, backward,
// gradient averaging, optimizer step — plus evaluation, checkpoints, resume, metrics and the run summary.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/train/config.hpp"

namespace ringtrain::train {

class Trainer {
public:
    Trainer(const Config& config, comm::Communicator& comm);
    ~Trainer();
    Trainer(const Trainer&) = delete;
    Trainer& operator=(const Trainer&) = delete;

    // Trains as configured (resuming if asked) and returns the run summary (also written by rank 0).
    nlohmann::json train();
    // Loads `checkpoint` and evaluates on the test set; returns {test_accuracy, test_loss, samples}.
    nlohmann::json evaluate_checkpoint(const std::string& checkpoint);

    // FNV hash of the current parameter values (tests compare it across ranks).
    uint64_t parameter_hash() const;
    // Flat copy of all parameter values (tests compare runs).
    std::vector<float> parameters_flat() const;

private:
    void build_locally();       // data, model, optimizer: no collectives
    void build_optimizer();
    void build_collectively();  // model agreement, broadcast from rank 0
    struct State;
    std::unique_ptr<State> s_;
};

}  // namespace ringtrain::train

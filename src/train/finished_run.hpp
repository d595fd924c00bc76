// A resumed run that has nothing left to train (private to train). A requeued or resubmitted job whose checkpoint is
// already the end of the run (every epoch trained, or train.max_steps reached) used to train nothing and write a
// summary of nothing (no test accuracy, 0 samples/s) over the finished run's: the results were lost. The finished
// run's summary.json stays instead.
#pragma once

#include <nlohmann/json.hpp>
#include <functional>
#include <optional>
#include <string>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/train/run_plan.hpp"

namespace ringtrain::train::detail {

// Whether a run at `at` has nothing left to train: every epoch done, or train.max_steps reached.
bool nothing_left(const LoopState& at, const TrainPlan& train);

// For a resumed run with nothing_left(), collective. Rank 0 reads output_dir/summary.json; when it is there and
// reads as a JSON object, rank 0 says so in one line (where the checkpoint left the run, e.g. "epoch 2 of 2") and
// every rank gets a summary to report: rank 0 the file's, the others {"stopped": null}; "stopped" is null on rank 0
// too (the run is complete, whatever stopped its last job). nullopt on every rank otherwise (a job that ended
// between its final checkpoint and its summary): the caller then writes a summary as usual.
//
// A kept summary without the final model's test figures (its job was stopped by a signal at the run's last step,
// which skips the evaluation to keep within the grace time) would stay without them for ever: then every rank calls
// `evaluate` (collective; returns the test figures, the same on every rank), and rank 0 adds them to the summary,
// marks the run as not stopped, and writes summary.json again.
std::optional<nlohmann::json> keep_finished_run_summary(comm::Communicator& comm, const RunPlan& plan,
                                                        const LoopState& at,
                                                        const std::function<nlohmann::json()>& evaluate);

}  // namespace ringtrain::train::detail

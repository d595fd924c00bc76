// SparseStepModel: the predicted step of a sparse (click-log) data-parallel run at N ranks. Pure arithmetic on plain
// inputs (tests/scaling checks it on hand-made ones); the trainer feeds it its own measurements after every
// multi-rank sparse run (train/run_prediction.hpp, predict_sparse_run).
//
// A sparse step has no overlap: every part follows the one before it, so the step is their sum —
//   s·(input + forward + backward)          this rank's parse wait and compute, s = 1 + straggler
//   + the opening allreduce                 the loss sums, batch and stop flags (4 doubles) that start each step
//   + the exchange                          a list of collectives with their bytes and the share of steps they run
//                                           (today one slot allgather on allgather steps, or the dense allreduce on
//                                           dense steps; owner-computes updates add a second gather of the
//                                           updated rows: one more entry)
//   + the merge                             rows merged per step × seconds per row
//   + s·optimizer.
// Collectives are costed with the ring's α-β formulas: allreduce of n bytes 2(N−1)α + 2(N−1)/N·n·β, allgather of
// n bytes from each rank (N−1)α + (N−1)·n·β.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/scaling/link.hpp"
#include "ringtrain/scaling/scaling_model.hpp"

namespace ringtrain::scaling {

enum class CollectiveKind { Allreduce, Allgather };

// One collective of the step. `bytes`: the whole buffer for an allreduce, each rank's contribution for an allgather.
struct Collective {
    std::string name;  // "slot allgather", "dense allreduce"
    CollectiveKind kind = CollectiveKind::Allgather;
    double bytes = 0;
    double per_step = 1;  // the share of steps it runs on (0.25: one step in four)
};

// Its ring α-β time at `ranks` ranks (0 for one rank), for one call (per_step not applied).
CollectiveTime collective_time(const Collective& c, int ranks, const Link& link);

// Collectives timed together at `ranks` ranks (e.g. a step's whole exchange, each with its per_step share), for
// fitting a link.
struct TimedCollectives {
    std::vector<Collective> collectives;
    double seconds = 0;
};
// α and β fitted through the ring formulas of the samples (least squares on relative errors, as fit_link).
// Needs two samples whose (α, β) coefficients are not proportional and ranks >= 2 (Error otherwise); a negative α
// or β is clamped to 0 and the other refitted alone.
Link fit_collectives_link(std::span<const TimedCollectives> samples, int ranks, std::string source);

struct SparseStepInputs {
    // One rank's time per step (seconds).
    double input_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
    double opening_bytes = 4 * sizeof(double);  // the allreduce that starts each step (0: none of its own, when
                                                // it rides in an exchange entry: owner updates)
    std::vector<Collective> exchange;           // the gradient exchange's collectives
    double merge_rows = 0;                      // rows merged per step (over the steps that merge)
    double merge_s_per_row = 0;
    double straggler = 0;                       // the slowest rank's extra share of compute
    // >= 0: the exchange's measured time per step (a run predicting its own step), used instead of the formulas; the
    // link then only splits it into latency (at most the formulas' α part) and bandwidth.
    double measured_exchange_s = -1;
    double compute_s() const { return input_s + forward_s + backward_s + optimizer_s; }
};

struct SparseTerms {  // seconds per step; they add up to the step time
    double input = 0, compute = 0, optimizer = 0, straggler = 0, communication = 0, latency = 0, merge = 0;
};

struct SparsePrediction {
    int ranks = 1;
    int64_t batch_per_rank = 0;
    double step_s = 0, samples_per_s = 0, efficiency = 0;
    SparseTerms terms;
    std::string dominant;  // the largest term's name
    CollectiveTime opening;  // per step
    std::vector<CollectiveTime> exchange;  // per entry, per step (per_step applied)
};

// The step at `ranks` ranks. Efficiency = one rank's step (compute only) ÷ the step at N (weak scaling). Error on a
// negative input, a per_step outside [0, 1] or ranks < 1.
SparsePrediction predict_sparse_step(const SparseStepInputs& in, const Link& link, int ranks, int64_t batch_per_rank);

std::string dominant_term(const SparseTerms& terms);
// {"input", "compute", "optimizer", "straggler", "communication", "latency", "merge"} in seconds.
nlohmann::json terms_json(const SparseTerms& terms);

}  // namespace ringtrain::scaling

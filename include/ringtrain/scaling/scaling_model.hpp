// ScalingModel: the predicted step time of a data-parallel run at N ranks, from one rank's measured step (compute per
// phase, and when each gradient becomes ready in backward), the run's own bucket layout, and an α-β link.
// Pure arithmetic: no measurement, no communication (tests/predict checks it on hand-made inputs). A layer of its own
// below train (core + sync's BucketLayout), so that `ringtrain predict` (predict layer) and the trainer's prediction
// after every multi-rank run (train/run_prediction.hpp) share one model.
//
// Assumptions (docs/scaling.md): weak scaling (per-rank batch fixed, so each rank's compute does not change with N);
// every rank as fast as the measured one except the slowest, `straggler` slower, whom every collective waits for;
// one link per rank with the given α and β, no contention beyond what the algorithm's formula counts; reduction and
// packing cost inside the measured/fitted β; buckets reduced strictly in order, one at a time (as GradientSync does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/scaling/link.hpp"
#include "ringtrain/sync/bucket_layout.hpp"

namespace ringtrain::scaling {

enum class Algorithm { Ring, RecursiveDoubling, HalvingDoubling };
const char* to_string(Algorithm a);
inline constexpr Algorithm kAlgorithms[] = {Algorithm::Ring, Algorithm::RecursiveDoubling,
                                             Algorithm::HalvingDoubling};

// Seconds for one allreduce of `bytes` at `ranks` ranks (0 for one rank), split into its latency (α) and
// bandwidth (β) parts.
struct CollectiveTime {
    double latency_s = 0, bandwidth_s = 0;
    double total() const { return latency_s + bandwidth_s; }
};
CollectiveTime allreduce_time(Algorithm a, int ranks, double bytes, const Link& link);

// One rank's measured step (seconds per step, medians).
struct StepTimings {
    double input_s = 0;      // waiting for the batch
    double forward_s = 0;    // forward and loss
    double backward_s = 0;   // backward (loss gradient included)
    double optimizer_s = 0;  // the update
    std::vector<size_t> grad_floats;  // per parameter, parameter order
    std::vector<double> ready_s;      // per parameter: when its gradient was final, seconds after backward began
    double compute_s() const { return input_s + forward_s + backward_s + optimizer_s; }
};

// What is predicted with: the run's sync settings and the model's parameters.
struct Setting {
    Algorithm algorithm = Algorithm::Ring;
    double wire_bytes_per_float = 4;  // 2 with fp16/bf16 compression
    bool overlap = true;              // buckets start while backward goes on
    double straggler = 0;             // the slowest rank's extra share of compute (0.05 = 5 % slower)
    int local_sgd_period = 0;         // > 0: local SGD, parameters averaged (blocking) every this many steps
    std::string describe() const;     // "ring fp32 overlap"
};

struct Terms {  // seconds per step; they add up to the step time
    double input = 0, compute = 0, optimizer = 0, straggler = 0, communication = 0, latency = 0;
};

struct Prediction {
    int ranks = 1;
    int64_t batch_per_rank = 0;
    double step_s = 0, samples_per_s = 0, efficiency = 0;
    Terms terms;
    std::string dominant;  // the largest term: compute, input, optimizer, straggler, communication, latency
    std::vector<double> bucket_end_s;  // when each bucket's allreduce ended, from the step's start (tests, tables)
    Setting setting;
};

// The step at `ranks` ranks with `layout` (fusion buckets in backward order) over `link`.
// Efficiency = samples/s at N ÷ (N × samples/s at one rank) = one rank's step ÷ the step at N (weak scaling).
// `bucket_seconds` (optional, one per bucket): each bucket's allreduce time measured at this N, used instead of the
// formula (a run predicting its own step); the link then only splits each into latency (at most the formula's α
// part) and bandwidth. Error when given with another count than the layout's buckets.
Prediction predict_step(const StepTimings& t, const sync::BucketLayout& layout, const Link& link, const Setting& s,
                        int ranks, int64_t batch_per_rank, std::span<const double> bucket_seconds = {});

// The largest term's name.
std::string dominant_term(const Terms& terms);

// {"input", "compute", "optimizer", "straggler", "communication", "latency"} in seconds: the `terms_s` of
// `ringtrain predict`'s rows and of summary.json's `predicted`.
nlohmann::json terms_json(const Terms& terms);

}  // namespace ringtrain::scaling

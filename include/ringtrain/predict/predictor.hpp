// Predictor: from a run's plan and one rank's measured step to predicted rows at N ranks (the configured setting and
// the best of the available algorithms and wire formats), as a table and as JSON (`ringtrain predict`).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/scaling/measured_allreduce.hpp"
#include "ringtrain/scaling/scaling_model.hpp"
#include "ringtrain/train/run_plan.hpp"
#include "ringtrain/train/step_profile.hpp"

namespace ringtrain::predict {

// One step of `passes` forward/backward passes (sync.backward_passes_per_step) from one measured pass.
scaling::StepTimings timings_from(const train::StepProfile& profile, int64_t passes = 1);

// The layout GradientSync would settle on: by ready time with sync.cycle_time_ms > 0 and overlap (host paths), else
// by size (sync.fusion_bytes); under local SGD the parameter averager's groups, by size.
sync::BucketLayout layout_for(const train::SyncPlan& sync, const scaling::StepTimings& t);

// The allreduce algorithm the plan's backend runs, as the model knows it: Auto for ring (its own choice per message
// size), the ring's formula for mpi and nccl.
scaling::Algorithm algorithm_for(const train::SyncPlan& sync);

// The configured setting: the plan's compression, overlap and local SGD; `algorithm` for the allreduce.
scaling::Setting setting_for(const train::SyncPlan& sync, scaling::Algorithm algorithm, double straggler);

struct Row {
    scaling::Prediction configured;
    scaling::Prediction best;  // the faster of {fp32, 16-bit} on the wire (fp32 alone under local SGD), the rest as configured
};

// `measured` (predict --measure): each bucket's allreduce takes the time measured at its size, carried to other N by
// the model (scaling::MeasuredAllreduce); the link then only splits it into latency and bandwidth. Without it, the
// link's α-β formula.
std::vector<Row> predict_rows(const scaling::StepTimings& t, const sync::BucketLayout& layout, const scaling::Link& link,
                              const scaling::Setting& configured, const std::vector<int>& ranks, int64_t batch_per_rank,
                              const scaling::MeasuredAllreduce* measured = nullptr);

// Each bucket's allreduce seconds at `n` ranks with setting `s`'s wire format, from `measured`.
std::vector<double> bucket_seconds(const sync::BucketLayout& layout, const scaling::Setting& s, int n,
                                   const scaling::MeasuredAllreduce& measured);

// "2,4,8" -> {2, 4, 8}; "" -> 2, 4, ..., 512. Throws InputError for anything but positive integers.
std::vector<int> parse_ranks(const std::string& text);
// "auto", "ring", "recursive_doubling", "halving_doubling"; InputError otherwise.
scaling::Algorithm parse_algorithm(const std::string& text);

std::string format_table(const std::vector<Row>& rows, const scaling::Link& link);
nlohmann::json rows_json(const std::vector<Row>& rows);
nlohmann::json profile_json(const train::StepProfile& profile, const sync::BucketLayout& layout);
// The profile back from a `predict --json` file's "profile" (to predict again without measuring, e.g. other links
// or a profile taken on another machine). Throws InputError naming the file and the missing or wrong key.
train::StepProfile profile_from_json(const nlohmann::json& doc, const std::string& source);
// The "spread" of a `predict --measure --json` file (every measured rank's step-time quantiles), checked; null stays
// null (a profile of one rank). Throws InputError naming the file.
nlohmann::json spread_from_json(const nlohmann::json& spread, const std::string& source);

// The "contention" of a `predict --json` file ({"compute", "communication"}: factors from 1 to 1e6), checked.
// Throws InputError naming the file.
scaling::Contention contention_from_json(const nlohmann::json& contention, const std::string& source);

}  // namespace ringtrain::predict

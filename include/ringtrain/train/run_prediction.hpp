// RunPrediction: what the scaling model (scaling/scaling_model.hpp) says a multi-rank run's step should have taken,
// from that run's own measurements, next to what it took: summary.json's "predicted" and the end-of-run line
// ("scaling: 0.87 of linear; predicted step 41.2 ms vs measured 43.0 ms (+4 %); dominant: allreduce of bucket 1
// (fc1, 4.7 MB) over ring").
//
// The inputs are this run's, not a separate profile: rank 0's time per step in each phase (so compute is measured at
// this N, co-located ranks and all), when each gradient became ready after the last pass's backward began (a mean
// over the steps after the first), the run's final bucket layout, the slowest rank's extra local work per step (the
// straggler report), and a link fitted to the run's own gradient allreduces (each bucket's mean time over every
// rank and step, less the wait for the slowest rank, plus a one-float latency probe taken at set-up). Why the run's
// own collectives and not a probe of sizes: they are timed in the regime the run is in (its message sizes, its
// compute gaps between them, a shaped link's token bucket refilled or not, CPU shared with backward), and a probe
// long enough to see past a `tc` shaper's burst at 100 Mbit/s would cost far more than the 50 ms allowed at set-up.
// So at the run's own N the prediction tests the model's timeline (overlap, exposure, straggler), not the α-β
// extrapolation in N (bench/sweep.py and `ringtrain predict` test that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/scaling/link.hpp"
#include "ringtrain/scaling/scaling_model.hpp"
#include "ringtrain/scaling/sparse_step_model.hpp"

namespace ringtrain::train {

// One run's measurements, per step (means); everything the prediction uses, nothing else.
struct RunMeasurements {
    int ranks = 0;
    int64_t batch_per_rank = 0;   // samples per pass per rank
    int64_t passes = 1;           // sync.backward_passes_per_step
    double measured_step_s = 0;   // train_s / steps
    // Rank 0's phases per step, all passes together.
    double data_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
    std::vector<size_t> grad_floats;         // per parameter, parameter order
    std::vector<std::string> grad_names;     // per parameter ("fc1.weight")
    std::vector<double> ready_s;             // per parameter: after the last pass's backward began (< 0: not reported)
    std::vector<size_t> tensors_per_bucket;  // the run's final layout, in backward order
    std::vector<double> bucket_s;            // per bucket: mean allreduce time over ranks and steps (0: none ran)
    double latency_probe_s = -1;             // a one-float allreduce at set-up (< 0: not taken)
    double slowest_work_s = 0;               // mean over steps of the slowest rank's local work (data+fwd+bwd)
    double mean_work_s = 0;                  // ... of the mean rank's
    double rank0_work_s = 0;                 // ... of rank 0's
    double wire_bytes_per_float = 4;         // 2 with 16-bit compression
    bool overlap = false;                    // buckets really were reduced while backward went on
    std::string backend;                     // "ring", "mpi", ...
};

struct RunPrediction {
    scaling::Prediction prediction;
    scaling::Link link;
    double straggler = 0;          // the slowest rank's extra share, relative to rank 0 (the model's `straggler`)
    double measured_step_s = 0;
    double fitted_link_step_s = 0;  // the same with every bucket's time from the fitted link instead of its own
    double one_rank_step_s = 0;    // this run's compute without communication: rank 0's data+fwd+bwd+optimizer
    double measured_efficiency = 0;  // one_rank_step_s / measured step
    double error = 0;              // (predicted − measured) / measured
    std::string dominant;          // the largest term in words ("allreduce of bucket 1 (fc1, 4.7 MB) over ring")
    // The setting in words, with the run's backend: "ring fp32 overlap"; "mpi fp32 no-overlap (modelled by the ring
    // formula)" where MPI picks its own algorithm.
    std::string setting;
};

// Pure arithmetic on `m` (tests/train/test_run_prediction.cpp checks it on hand-made inputs): the model's timeline
// with each bucket's own transfer time (bucket_transfer_s); the fitted link splits latency from bandwidth, and alone
// gives fitted_link_step_s. Throws Error when the sizes do not agree (gradients, buckets) or nothing was measured.
RunPrediction predict_run(const RunMeasurements& m);

// Each bucket's mean allreduce time less its share (in proportion to its time) of the wait for the slowest rank.
std::vector<double> bucket_transfer_s(const RunMeasurements& m);

// The link from the run's collectives: bucket b's time less its share of the wait for the slowest rank (that wait,
// slowest − mean local work, sits inside the collectives: a faster rank waits in its allreduce), at the bucket's
// wire bytes, and the latency probe at one float; the ring formula fitted to them at N = m.ranks.
scaling::Link link_from_run(const RunMeasurements& m);

// summary.json's "predicted".
nlohmann::json run_prediction_json(const RunPrediction& p);

// ---- the sparse path (SparseTrainer) ----
// Its step has no overlap (scaling/sparse_step_model.hpp): parse wait, forward, backward, the opening allreduce, the
// gradient exchange, the merge and the update, one after the other. The exchange's time is the run's own (every
// rank's time in the sparse sync, less the wait for the slowest rank inside it, less the merge), fitted with the
// one-float latency probe into a link; the merge's cost per row comes from a short probe at the end of the run.

// One sparse run's measurements, per step (means over the run's steps).
struct SparseRunMeasurements {
    int ranks = 0;
    int64_t batch_per_rank = 0;
    double measured_step_s = 0;  // train_s / steps
    // Rank 0's phases per step.
    double data_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
    double sync_s = 0;  // the sparse sync (exchange + merge + the wait for the slowest rank inside it), mean rank
    // forward + backward per step: the slowest rank's and the mean rank's (their difference is the wait inside the
    // sync, which follows them), and every phase but the sync: the slowest's (per stretch between the step's two
    // waits for every rank, summed) and rank 0's (their ratio is the straggler share).
    double slowest_before_sync_s = 0, mean_before_sync_s = 0;
    // The opening collective is timed with the sync, so it is an entry of the exchange ("opening allreduce", or with
    // owner updates "updated rows allgather (opening)"), not a term of its own.
    bool opening_in_exchange = false;
    double slowest_work_s = 0, rank0_work_s = 0;
    std::vector<scaling::Collective> exchange;  // the sync's collectives per step, with their shares of steps
    double merge_rows = 0;                      // rows entering the merge per step (every rank's)
    double merge_s_per_row = 0;                 // from the end-of-run probe
    double latency_probe_s = -1;                // a one-float allreduce (< 0: not taken)
    // What the sync time measured, for the fitted link's source (local SGD: its parameter averages).
    std::string timed = "this run's sparse gradient exchange (its sync time less the wait for the slowest rank and "
                        "the merge)";
    std::string backend;
};

struct SparseRunPrediction {
    scaling::SparsePrediction prediction;
    scaling::Link link;
    double straggler = 0;
    double measured_step_s = 0;
    double fitted_link_step_s = 0;  // the exchange from the fitted link's formulas instead of its measured time
    double exchange_s = 0;          // the exchange's measured time per step (sync less wait and merge)
    double merge_s_per_row = 0;     // the probe's, at most what the sync's own time leaves (95 % of it)
    double one_rank_step_s = 0;     // rank 0's data + forward + backward + optimizer
    double measured_efficiency = 0;
    double error = 0;               // (predicted − measured) / measured
    std::string dominant;           // in words ("slot allgather (61 KB per rank, every step) over mpi")
};

// Pure arithmetic on `m` (tests/train/test_run_prediction.cpp). Throws Error when nothing was measured or the link
// cannot be fitted.
SparseRunPrediction predict_sparse_run(const SparseRunMeasurements& m);

// summary.json's "predicted" for the sparse path: run_prediction_json's fields, terms_s with "merge", and the
// exchange's collectives.
nlohmann::json sparse_run_prediction_json(const SparseRunPrediction& p, const SparseRunMeasurements& m);

// The end-of-run line from summary.json ("" when the summary has no "predicted" with a step).
std::string describe_run_prediction(const nlohmann::json& summary);

}  // namespace ringtrain::train

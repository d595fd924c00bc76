// ScalingModel: the predicted step time of a data-parallel run at N ranks, from one rank's measured step (compute per
// phase, and when each gradient becomes ready in backward), the run's own bucket layout, and an α-β link.
// Pure arithmetic: no measurement, no communication (tests/predict checks it on hand-made inputs). A layer of its own
// below train (core + sync's BucketLayout), so that `ringtrain predict` (predict layer) and the trainer's prediction
// after every multi-rank run (train/run_prediction.hpp) share one model.
//
// Assumptions (docs/scaling.md): weak scaling (per-rank batch fixed, so each rank's compute does not change with N);
// every rank as fast as the measured one except the slowest, `straggler` slower, whom every collective waits for;
// one link per rank with the given α and β, no contention on the link beyond what the algorithm's formula counts;
// reduction and packing cost inside the measured/fitted β; buckets reduced strictly in order, one at a time (as
// GradientSync does); backward and an allreduce in flight slowed by the measured Contention for the host's cores
// while they overlap (none unless measured).
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

// Auto: what sync.backend ring runs between hosts, chosen per message by its float32 size (ring_backend_choice).
enum class Algorithm { Auto, Ring, RecursiveDoubling, HalvingDoubling };
const char* to_string(Algorithm a);
inline constexpr Algorithm kAlgorithms[] = {Algorithm::Auto, Algorithm::Ring, Algorithm::RecursiveDoubling,
                                             Algorithm::HalvingDoubling};

// The algorithm sync.backend ring runs for one allreduce of `float32_bytes` (the message's float32 size, whatever
// the wire format) at `ranks` ranks across hosts, as comm::RingCommunicator chooses with its default options:
// recursive doubling below 128 KiB, halving-doubling below 4 MiB at a power of two from 4 ranks, else the ring.
// (Inside one host it takes shared memory instead, which the α-β model does not describe.)
Algorithm ring_backend_choice(int ranks, double float32_bytes);

// How the model knows sync.backend `backend`'s allreduce: Auto for "ring" (its own choice per message size), the
// ring's formula for "mpi" and "nccl" (they choose by rules of their own; the ring is their large messages').
Algorithm algorithm_of_backend(const std::string& backend);

// Seconds for one allreduce of `bytes` at `ranks` ranks (0 for one rank), split into its latency (α) and
// bandwidth (β) parts. Auto resolves by `float32_bytes` (0: `bytes`).
struct CollectiveTime {
    double latency_s = 0, bandwidth_s = 0;
    double total() const { return latency_s + bandwidth_s; }
};
CollectiveTime allreduce_time(Algorithm a, int ranks, double bytes, const Link& link, double float32_bytes = 0);

// The algorithm's model, α·latency + β·bandwidth terms, fitted to allreduce times taken at `ranks` ranks (weighted
// least squares on relative errors: the sizes may span orders of magnitude, and an unweighted fit would let the
// largest messages' noise decide α), so that predictions at N = `ranks` reproduce the samples. Auto fits each
// sample by the algorithm its size takes. Needs two distinct sizes and ranks >= 2 (Error otherwise); α and β are
// kept >= 0 (the other refitted alone). `source` goes into Link::source.
Link fit_link(std::span<const LinkSample> samples, int ranks, Algorithm a, std::string source);

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

// How much slower backward and an allreduce each run while the other runs beside it on the same host (1: not at all).
// Both share the host's cores with the network stack: where every core has a rank (mpirun -np <cores>, or ranks of
// emulated hosts on one machine), an allreduce in flight takes cycles from backward and waits for them in turn.
// `ringtrain predict --measure` times both under load (predict/contention_measurement.hpp); a host with cores to
// spare measures about 1. The same at every N: ranks per host do not change with the number of hosts.
struct Contention {
    double compute = 1;        // backward's time while an allreduce is in flight ÷ its time alone
    double communication = 1;  // an allreduce's time while backward runs ÷ its time alone
    bool any() const { return compute != 1 || communication != 1; }
};

// What is predicted with: the run's sync settings and the model's parameters.
struct Setting {
    Algorithm algorithm = Algorithm::Ring;
    double wire_bytes_per_float = 4;  // 2 with fp16/bf16 compression
    bool overlap = true;              // buckets start while backward goes on
    double straggler = 0;             // the slowest rank's extra share of compute (0.05 = 5 % slower)
    int local_sgd_period = 0;         // > 0: local SGD, parameters averaged (blocking) every this many steps
    Contention contention;            // while buckets overlap backward (no effect without overlap or under local SGD)
    std::string describe() const;     // "ring fp32 overlap"
};

struct Terms {  // seconds per step; they add up to the step time
    double input = 0, compute = 0, optimizer = 0, straggler = 0, communication = 0, latency = 0;
    double contention = 0;  // backward's extra time while allreduces ran beside it (Setting::contention)
};

struct Prediction {
    int ranks = 1;
    int64_t batch_per_rank = 0;
    double step_s = 0, samples_per_s = 0, efficiency = 0;
    Terms terms;
    std::string dominant;  // the largest term: compute, input, optimizer, straggler, communication, latency, contention
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

// The largest term's name (compute, input, optimizer, straggler, communication, latency, contention).
std::string dominant_term(const Terms& terms);

// {"input", "compute", "optimizer", "straggler", "communication", "latency", "contention"} in seconds: the `terms_s` of
// `ringtrain predict`'s rows and of summary.json's `predicted`.
nlohmann::json terms_json(const Terms& terms);

}  // namespace ringtrain::scaling

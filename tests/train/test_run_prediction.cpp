// The run's own prediction (train/run_prediction.hpp) on hand-made measurements, every number worked out by hand:
// the link fitted from the run's bucket times less the wait for the slowest rank, the straggler share, the
// overlapped timeline, the dominant term in words, and the end-of-run line.
#include <catch2/catch.hpp>

#include <cmath>

#include "ringtrain/core/error.hpp"
#include "ringtrain/train/run_prediction.hpp"

using namespace ringtrain;
using namespace ringtrain::train;
using Catch::Matchers::Contains;

namespace {

// 2 ranks, one bucket of 1250 floats (5000 bytes), blocking; a link of α = 10 µs, β = 1 ns/byte: the bucket's
// transfer is 2·10 µs + 5000 ns = 25 µs, the one-float probe 20.004 µs. Rank 0 works 10 ms a step (1 + 3 + 6), the
// mean rank 10.8 ms, the slowest 11 ms: a straggler share of 11/10 − 1 = 0.1, and 0.2 ms of waiting for the slowest
// inside every allreduce (measured 0.225 ms).
RunMeasurements blocking_two_ranks() {
    RunMeasurements m;
    m.ranks = 2;
    m.batch_per_rank = 32;
    m.measured_step_s = 12.5e-3;
    m.data_s = 1e-3;
    m.forward_s = 3e-3;
    m.backward_s = 6e-3;
    m.optimizer_s = 0.5e-3;
    m.grad_floats = {1000, 250};
    m.grad_names = {"fc.weight", "fc.bias"};
    m.ready_s = {-1, -1};
    m.tensors_per_bucket = {2};
    m.bucket_s = {225e-6};
    m.latency_probe_s = 20.004e-6;
    m.rank0_work_s = 10e-3;
    m.mean_work_s = 10.8e-3;
    m.slowest_work_s = 11e-3;
    m.overlap = false;
    m.backend = "mpi";
    return m;
}

// 3 ranks, two buckets overlapped with backward: fc2 (250,000 floats, 1 MB, ready 1 ms into backward) and fc1
// (500,000 floats, 2 MB, ready at its end, 6 ms); α = 0, β = 10 ns/byte, so the ring takes 4/3·n·β: 13.333 ms and
// 26.667 ms. No straggler, no probe: the two sizes fit the line.
RunMeasurements overlapped_three_ranks() {
    RunMeasurements m;
    m.ranks = 3;
    m.batch_per_rank = 10;
    m.measured_step_s = 50e-3;
    m.data_s = 0;
    m.forward_s = 1e-3;
    m.backward_s = 6e-3;
    m.optimizer_s = 1e-3;
    m.grad_floats = {499000, 1000, 249000, 1000};
    m.grad_names = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
    m.ready_s = {6e-3, 6e-3, 1e-3, 1e-3};
    m.tensors_per_bucket = {2, 2};  // backward order: fc2 first
    m.bucket_s = {4.0 / 3.0 * 1e6 * 1e-8, 4.0 / 3.0 * 2e6 * 1e-8};
    m.rank0_work_s = m.mean_work_s = m.slowest_work_s = 7e-3;
    m.overlap = true;
    m.backend = "ring";
    return m;
}

}  // namespace

TEST_CASE("the link comes from the run's bucket times less the wait for the slowest rank, and the probe",
          "[train][predict]") {
    const scaling::Link link = link_from_run(blocking_two_ranks());
    CHECK(link.alpha_s == Approx(10e-6).epsilon(1e-6));
    CHECK(link.beta_s_per_byte == Approx(1e-9).epsilon(1e-6));
    CHECK_THAT(link.source, Contains("1 bucket(s)") && Contains("latency probe") && Contains("over mpi"));

    // Two bucket sizes and no probe: the line through them (α = 0, β = 10 ns/byte).
    const scaling::Link two = link_from_run(overlapped_three_ranks());
    CHECK(two.alpha_s == Approx(0).margin(1e-12));
    CHECK(two.beta_s_per_byte == Approx(1e-8).epsilon(1e-6));

    // One size only: no latency can be told apart; 25 µs for 5000 bytes at N = 2 is all bandwidth (5 ns/byte).
    RunMeasurements one = blocking_two_ranks();
    one.latency_probe_s = -1;
    const scaling::Link single = link_from_run(one);
    CHECK(single.alpha_s == 0);
    CHECK(single.beta_s_per_byte == Approx(25e-6 / 5000).epsilon(1e-6));
    CHECK_THAT(single.source, Contains("not separable"));
}

TEST_CASE("a blocking run: the slowest rank's compute, the transfer, the optimizer", "[train][predict]") {
    const RunPrediction r = predict_run(blocking_two_ranks());
    const scaling::Prediction& p = r.prediction;
    CHECK(r.straggler == Approx(0.1));
    // 1.1 × 10 ms + 25 µs + 1.1 × 0.5 ms
    CHECK(p.step_s == Approx(11.575e-3).epsilon(1e-6));
    CHECK(p.terms.compute == Approx(9e-3));
    CHECK(p.terms.straggler == Approx(0.1 * 10.5e-3));
    CHECK(p.terms.latency == Approx(20e-6).epsilon(1e-4));
    CHECK(p.terms.communication == Approx(5e-6).epsilon(1e-3));
    CHECK(p.samples_per_s == Approx(2 * 32 / 11.575e-3));
    CHECK(p.efficiency == Approx(10.5 / 11.575));
    CHECK(r.one_rank_step_s == Approx(10.5e-3));
    CHECK(r.measured_efficiency == Approx(10.5 / 12.5));
    CHECK(r.error == Approx((11.575 - 12.5) / 12.5));
    CHECK(r.dominant == "compute (forward+backward, 9.00 ms)");
}

TEST_CASE("an overlapped run: the bucket that sticks out most past backward is named", "[train][predict]") {
    const RunPrediction r = predict_run(overlapped_three_ranks());
    const scaling::Prediction& p = r.prediction;
    // fc2 starts 2 ms in (1 ms forward + 1 ms) and ends at 15.333 ms; fc1 is ready at 7 ms but waits for it and
    // ends at 42 ms; the optimizer's 1 ms makes 43 ms. Exposed: 42 − 7 = 35 ms, of it 26.667 ms fc1's.
    REQUIRE(p.bucket_end_s.size() == 2);
    CHECK(p.bucket_end_s[0] == Approx(2e-3 + 13.3333e-3).epsilon(1e-4));
    CHECK(p.bucket_end_s[1] == Approx(42e-3).epsilon(1e-4));
    CHECK(p.step_s == Approx(43e-3).epsilon(1e-4));
    CHECK(p.terms.communication == Approx(35e-3).epsilon(1e-4));
    CHECK(p.terms.latency == Approx(0).margin(1e-9));
    CHECK(p.dominant == "communication");
    CHECK(r.dominant == "allreduce of bucket 1 (fc1, 2 MB) over ring");
    CHECK(r.error == Approx((43.0 - 50.0) / 50.0).epsilon(1e-4));
    CHECK(p.efficiency == Approx(8.0 / 43.0).epsilon(1e-4));
}

TEST_CASE("the buckets' own times go through the timeline; the fitted line alone is reported beside it",
          "[train][predict]") {
    RunMeasurements m = overlapped_three_ranks();
    m.latency_probe_s = 1e-3;  // a third point off the buckets' line: the fit no longer passes through them
    const RunPrediction r = predict_run(m);
    CHECK(r.prediction.step_s == Approx(43e-3).epsilon(1e-4));  // as before: each bucket's own time
    CHECK(std::abs(r.fitted_link_step_s - 43e-3) > 0.1e-3);
    CHECK(r.link.alpha_s > 0);
    const nlohmann::json j = run_prediction_json(r);
    CHECK(j["step_s_fitted_link"].get<double>() == Approx(r.fitted_link_step_s));
    CHECK(j["error_fitted_link"].get<double>() == Approx((r.fitted_link_step_s - 50e-3) / 50e-3));
    // Each bucket's transfer: its time less its share of the wait for the slowest rank (none here).
    CHECK(bucket_transfer_s(m) == m.bucket_s);
    RunMeasurements waited = blocking_two_ranks();  // 0.2 ms of the 0.225 ms was waiting
    CHECK(bucket_transfer_s(waited)[0] == Approx(25e-6));
}

TEST_CASE("the bucket named is the one whose own time stuck out most past backward", "[train][predict]") {
    RunMeasurements m = overlapped_three_ranks();
    m.bucket_s = {30e-3, 1e-3};  // fc2 (1 MB) slow, fc1 (2 MB) fast: the line through them is no guide
    const RunPrediction r = predict_run(m);
    // fc2: ready at 2 ms, ends at 32 ms (25 ms past backward's end at 7 ms); fc1: 32 -> 33 ms (1 ms).
    CHECK(r.prediction.step_s == Approx(34e-3).epsilon(1e-6));
    CHECK_THAT(r.dominant, Catch::Matchers::StartsWith("allreduce of bucket 0 (fc2, 1 MB) over ring"));
}

TEST_CASE("accumulated passes: only the last backward overlaps the allreduce", "[train][predict]") {
    RunMeasurements m = overlapped_three_ranks();
    m.passes = 2;  // phases hold both passes: 2 ms forward, 12 ms backward
    m.forward_s = 2e-3;
    m.backward_s = 12e-3;
    const RunPrediction r = predict_run(m);
    // backward begins at 2 + 6 = 8 ms; fc2 ready at 9 ms, ends at 22.333 ms; fc1 ends at 49 ms; + 1 ms.
    CHECK(r.prediction.step_s == Approx(50e-3).epsilon(1e-4));
    CHECK(r.prediction.samples_per_s == Approx(3 * 10 * 2 / 50e-3).epsilon(1e-4));
}

TEST_CASE("the summary's predicted section and the end-of-run line", "[train][predict]") {
    const nlohmann::json j = run_prediction_json(predict_run(blocking_two_ranks()));
    CHECK(j["step_s"].get<double>() == Approx(11.575e-3).epsilon(1e-6));
    CHECK(j["measured_step_s"].get<double>() == Approx(12.5e-3));
    CHECK(j["link"]["alpha_s"].get<double>() == Approx(10e-6).epsilon(1e-6));
    CHECK(j["link"].contains("beta_s_per_byte"));
    CHECK(j["link"].contains("source"));
    CHECK(j["error"].get<double>() == Approx(-0.074));  // (predicted - measured) / measured
    CHECK(j.contains("samples_per_s"));
    CHECK(j.contains("efficiency"));
    // The run's backend, not the formula's name: MPI picks its own algorithm.
    CHECK(j["setting"] == "mpi fp32 no-overlap (modelled by the ring formula)");
    CHECK(run_prediction_json(predict_run(overlapped_three_ranks()))["setting"] == "ring fp32 overlap");
    const std::string line = describe_run_prediction({{"predicted", j}});
    CHECK_THAT(line, Contains("compute: 0.84 of the step (not weak scaling: that needs a one-rank run); predicted step 11.5") && Contains("vs measured 12.5 ms (-7 %)") &&
                         Contains("dominant: compute (forward+backward, 9.00 ms)"));
    CHECK(describe_run_prediction({{"world_size", 1}}).empty());
    CHECK(describe_run_prediction({{"predicted", {{"why", "local SGD"}}}}).empty());
}

TEST_CASE("inconsistent measurements are refused", "[train][predict]") {
    RunMeasurements m = blocking_two_ranks();
    m.bucket_s = {};
    CHECK_THROWS_AS(predict_run(m), Error);
    m = blocking_two_ranks();
    m.ready_s = {0.0};
    CHECK_THROWS_AS(predict_run(m), Error);
    m = blocking_two_ranks();
    m.bucket_s = {0.0};
    CHECK_THROWS_AS(predict_run(m), Error);
    m = blocking_two_ranks();
    m.ranks = 1;
    CHECK_THROWS_AS(predict_run(m), Error);
}

namespace {

// The sparse path, 2 ranks, a link of α = 10 µs, β = 1 ns/byte: a 20,000-byte slot allgather every step takes
// 10 µs + 20 µs = 30 µs, the one-float probe 2·10 µs + 4 ns. The merge: 1000 rows at 20 ns = 20 µs. The slowest
// rank's forward + backward is 0.1 ms longer than the mean rank's: 100 µs of waiting inside the sync, whose
// measured time is then 30 + 20 + 100 = 150 µs. Rank 0 works 6.5 ms a step (1 + 2 + 3 + 0.5), the slowest 7.15 ms.
SparseRunMeasurements sparse_two_ranks() {
    SparseRunMeasurements m;
    m.ranks = 2;
    m.batch_per_rank = 100;
    m.measured_step_s = 8e-3;
    m.data_s = 1e-3;
    m.forward_s = 2e-3;
    m.backward_s = 3e-3;
    m.optimizer_s = 0.5e-3;
    m.sync_s = 150e-6;
    m.slowest_before_sync_s = 5.1e-3;
    m.mean_before_sync_s = 5e-3;
    m.rank0_work_s = 6.5e-3;
    m.slowest_work_s = 7.15e-3;
    m.exchange = {{"slot allgather", scaling::CollectiveKind::Allgather, 20000, 1}};
    m.merge_rows = 1000;
    m.merge_s_per_row = 20e-9;
    m.latency_probe_s = 20.004e-6;
    m.backend = "mpi";
    return m;
}

}  // namespace

TEST_CASE("predict_sparse_run: link from the run's exchange, wait and merge taken off, the step summed",
          "[train][predict][sparse]") {
    const SparseRunPrediction r = predict_sparse_run(sparse_two_ranks());
    CHECK(r.exchange_s == Approx(30e-6));
    CHECK(r.link.alpha_s == Approx(10e-6));
    CHECK(r.link.beta_s_per_byte == Approx(1e-9));
    CHECK(r.straggler == Approx(0.1));
    // 1.1 × 6.5 ms + the opening allreduce (20 µs + 32 ns) + 30 µs + 20 µs.
    CHECK(r.prediction.step_s == Approx(7.220032e-3));
    CHECK(r.fitted_link_step_s == Approx(7.220032e-3));  // the fitted link reproduces the exchange exactly here
    CHECK(r.error == Approx((7.220032e-3 - 8e-3) / 8e-3));
    CHECK(r.measured_efficiency == Approx(6.5 / 8));
    CHECK(r.prediction.terms.merge == Approx(20e-6));
    CHECK_THAT(r.dominant, Contains("compute (forward+backward, 5.00 ms)"));
    const nlohmann::json j = sparse_run_prediction_json(r, sparse_two_ranks());
    CHECK(j["terms_s"]["merge"].get<double>() == Approx(20e-6));
    CHECK(j["exchange"][0]["name"] == "slot allgather");
    CHECK(j["setting"] == "sparse mpi (modelled by the ring formulas), no overlap");  // the run's backend, named
    SparseRunMeasurements over_ring = sparse_two_ranks();
    over_ring.backend = "ring";
    CHECK(sparse_run_prediction_json(r, over_ring)["setting"] == "sparse ring formulas, no overlap");
    CHECK_THAT(describe_run_prediction({{"predicted", j}}), Contains("predicted step 7.22 ms vs measured 8 ms (-10 %)"));
}

TEST_CASE("predict_sparse_run: a merge probe past the sync's own time is bounded by it; nothing timed is an error",
          "[train][predict][sparse]") {
    SparseRunMeasurements m = sparse_two_ranks();
    m.merge_s_per_row = 1e-3;  // a descheduled probe: 1 s of merge in a 150 µs sync
    const SparseRunPrediction r = predict_sparse_run(m);
    // At most 95 % of the 50 µs the wait leaves, per row; the exchange keeps its 5 % floor of the sync (7.5 µs).
    CHECK(r.merge_s_per_row == Approx(47.5e-9));
    CHECK(r.prediction.terms.merge == Approx(47.5e-6));
    CHECK(r.exchange_s == Approx(7.5e-6));
    m = sparse_two_ranks();
    m.sync_s = 0;
    CHECK_THROWS_AS(predict_sparse_run(m), Error);
    m = sparse_two_ranks();
    m.ranks = 1;
    CHECK_THROWS_AS(predict_sparse_run(m), Error);
}

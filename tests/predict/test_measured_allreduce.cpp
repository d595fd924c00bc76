// scaling::MeasuredAllreduce and predict_rows with measured times, on hand-made samples: every expected number is
// worked out in the comments (ring model, α = 10 µs, β = 1 ns/byte: at 2 ranks 2α + n·β, at 8 ranks 14α + 1.75·n·β).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/predict/predictor.hpp"
#include "ringtrain/scaling/measured_allreduce.hpp"

#include "hand_inputs.hpp"

using namespace ringtrain;
using namespace ringtrain::scaling;
using namespace rt_predict_test;

namespace {

// hand_timings(25000) with two_buckets: buckets of 100 kB and 1 MB, measured at 1 ms and 4 ms.
// Measured at 2 ranks: 100 kB in 1 ms, 1 MB in 4 ms, 10 MB in 20 ms (off the line on purpose: the line says 0.12,
// 1.02 and 10.02 ms).
MeasuredAllreduce hand_measured() {
    return MeasuredAllreduce({{1e6, 4e-3, 1e6}, {1e5, 1e-3, 1e5}, {1e7, 20e-3, 1e7}}, 2, Algorithm::Ring, hand_link());
}

}  // namespace

TEST_CASE("MeasuredAllreduce: the measured times at the measured N, the model times measured/model between them",
          "[predict]") {
    const MeasuredAllreduce m = hand_measured();
    CHECK(m.seconds(2, 1e6, 1e6) == 4e-3);  // a measured size: the measurement, whatever the line says
    CHECK(m.seconds(2, 1e5, 1e5) == 1e-3);
    // Half-way between 1e5 and 1e6 on a log scale (10^5.5 = 316,228 bytes): measured / model is 1 / 0.12 = 8.333 and
    // 4 / 1.02 = 3.922 at the two; their geometric mean 5.717 times the model there (20 us + 316.2 us): 1.922 ms.
    CHECK(m.seconds(2, std::pow(10.0, 5.5), std::pow(10.0, 5.5)) ==
          Approx(std::sqrt(1.0 / 0.12 * 4.0 / 1.02) * (20e-6 + std::pow(10.0, 5.5) * 1e-9)));
    CHECK(m.seconds(1, 1e6, 1e6) == 0.0);  // one rank sends nothing
}

TEST_CASE("MeasuredAllreduce: the ring backend's switch between two measured sizes follows the model", "[predict]") {
    // Measured exactly on the model at 64 and 256 KiB (recursive doubling, α + n·β = 75.536 us, and the ring,
    // 2α + n·β = 282.144 us): on either side of the switch at 128 KiB the time is the model's, not a line between.
    const double a = 65536, b = 262144;
    const MeasuredAllreduce m({{a, 10e-6 + a * 1e-9, a}, {b, 20e-6 + b * 1e-9, b}}, 2, Algorithm::Auto, hand_link());
    CHECK(m.seconds(2, 127 * 1024.0, 127 * 1024.0) == Approx(10e-6 + 127 * 1024e-9));  // 140.048 us
    CHECK(m.seconds(2, 130 * 1024.0, 130 * 1024.0) == Approx(20e-6 + 130 * 1024e-9));  // 153.12 us
}

TEST_CASE("MeasuredAllreduce: beyond the measured sizes and at other N, scaled as the model scales", "[predict]") {
    const MeasuredAllreduce m = hand_measured();
    // 20 MB at 2 ranks: 20 ms × (20 us + 20 ms) / (20 us + 10 ms) = 39.96 ms.
    CHECK(m.seconds(2, 2e7, 2e7) == Approx(20e-3 * 0.02002 / 0.01002));
    // 10 kB, below the smallest measured size: that size's time (latency), 1 ms.
    CHECK(m.seconds(2, 1e4, 1e4) == 1e-3);
    // 1 MB at 8 ranks: 4 ms × (140 us + 1.75 ms) / (20 us + 1 ms) = 7.41 ms.
    CHECK(m.seconds(8, 1e6, 1e6) == Approx(4e-3 * 1.89e-3 / 1.02e-3));
}

TEST_CASE("MeasuredAllreduce: refuses what cannot be a measurement", "[predict]") {
    CHECK_THROWS_AS(MeasuredAllreduce({{1e6, 4e-3, 1e6}}, 2, Algorithm::Ring, hand_link()), Error);  // one size
    CHECK_THROWS_AS(MeasuredAllreduce({{1e6, 4e-3, 1e6}, {1e6, 5e-3, 1e6}}, 2, Algorithm::Ring, hand_link()), Error);
    CHECK_THROWS_AS(MeasuredAllreduce({{1e6, 0.0, 1e6}, {1e5, 1e-3, 1e5}}, 2, Algorithm::Ring, hand_link()), Error);
    CHECK_THROWS_AS(MeasuredAllreduce({{1e6, 4e-3, 1e6}, {1e5, 1e-3, 1e5}}, 1, Algorithm::Ring, hand_link()), Error);
    CHECK_THROWS_AS(MeasuredAllreduce({{1e6, 4e-3, 1e6}, {1e5, 1e-3, 1e5}}, 2, Algorithm::Ring, Link{}), Error);
}

TEST_CASE("predict_rows with measured times: each bucket takes its size's measured time", "[predict]") {
    const StepTimings t = hand_timings(25000);
    const sync::BucketLayout layout = two_buckets(t);
    Setting s;
    s.algorithm = Algorithm::Ring;
    s.overlap = false;
    const MeasuredAllreduce m = hand_measured();
    CHECK(predict::bucket_seconds(layout, s, 2, m) == std::vector<double>{1e-3, 4e-3});
    // No overlap: backward ends at 1 + 4 + 10 = 15 ms, the buckets follow (1 + 4 ms), then the optimizer: 21 ms.
    const auto rows = predict::predict_rows(t, layout, hand_link(), s, {2, 8}, 64, &m);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].configured.step_s == Approx(21e-3));
    // The line alone: 15 + (0.12 + 1.02) + 1 = 17.14 ms.
    CHECK(predict::predict_rows(t, layout, hand_link(), s, {2}, 64)[0].configured.step_s == Approx(17.14e-3));
    // At 8 ranks each bucket's measured time is scaled by the model: 1 ms × (140 us + 0.175 ms) / 0.12 ms and
    // 7.41 ms (above): 15 + 2.625 + 7.412 + 1 = 26.04 ms.
    CHECK(rows[1].configured.step_s == Approx(15e-3 + 1e-3 * 0.315 / 0.12 + 4e-3 * 1.89 / 1.02 + 1e-3));
    // The 16-bit wire is priced from the measured times too: half the bytes on the wire, the time measured there.
    CHECK(rows[0].best.setting.wire_bytes_per_float == 2.0);
    CHECK(rows[0].best.step_s ==
          Approx(15e-3 + m.seconds(2, 5e4, 1e5) + m.seconds(2, 5e5, 1e6) + 1e-3));
}

TEST_CASE("predict_rows with measured times under local SGD: the averages priced from them, every K-th step",
          "[predict]") {
    const StepTimings t = hand_timings(25000);
    const sync::BucketLayout layout = two_buckets(t);
    Setting s;
    s.algorithm = Algorithm::Ring;
    s.local_sgd_period = 4;
    const MeasuredAllreduce m = hand_measured();
    // 16 ms of work, then the two groups' averages (1 + 4 ms measured) every 4th step: 16 + 5 / 4 = 17.25 ms; the
    // line alone says 16 + (0.12 + 1.02) / 4 = 16.285 ms.
    const auto rows = predict::predict_rows(t, layout, hand_link(), s, {2}, 64, &m);
    CHECK(rows[0].configured.step_s == Approx(17.25e-3));
    CHECK(predict::predict_rows(t, layout, hand_link(), s, {2}, 64)[0].configured.step_s == Approx(16.285e-3));
    CHECK(rows[0].best.setting.wire_bytes_per_float == 4.0);  // the averages travel in float32
}

TEST_CASE("layout_for: local SGD averages in fusion groups, not in gradient buckets by time", "[predict]") {
    const StepTimings t = hand_timings(25000);  // gradients ready 4 ms apart: a 1 ms cycle time closes a bucket after each
    train::SyncPlan plan;
    plan.fusion_bytes = 64 << 20;
    plan.cycle_time_ms = 1.0;
    plan.min_bucket_bytes = 0;
    plan.overlap = true;
    CHECK(predict::layout_for(plan, t).size() == 3);
    plan.mode = train::SyncMode::LocalSgd;
    CHECK(predict::layout_for(plan, t).size() == 1);  // 1.1 MB in one 64 MiB group, as sync::ParameterAverager
}

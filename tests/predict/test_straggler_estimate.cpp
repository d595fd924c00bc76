// The slowest-of-N share from ranks measured side by side, against hand-made step times with known answers.
#include <catch2/catch.hpp>

#include <vector>

#include "ringtrain/core/quantiles.hpp"
#include "ringtrain/predict/straggler_estimate.hpp"

using ringtrain::quantiles;
using ringtrain::predict::straggler_share;

TEST_CASE("quantiles: sorted, interpolated, ends at the sample's extremes", "[predict]") {
    const auto q = quantiles({4.0, 1.0, 3.0, 2.0, 5.0}, 9);
    REQUIRE(q.size() == 9);
    CHECK(q.front() == 1.0);
    CHECK(q.back() == 5.0);
    CHECK(q[4] == 3.0);       // the median
    CHECK(q[1] == Approx(1.5));  // half-way between the first and second order statistics
    CHECK(quantiles({}, 9).empty());
    CHECK(quantiles({7.0}, 3) == std::vector<double>{7.0, 7.0, 7.0});
}

TEST_CASE("straggler_share: ranks at one steady speed wait for nobody", "[predict]") {
    const std::vector<double> steady(101, 2.0);
    for (int n : {1, 2, 8, 512}) CHECK(straggler_share({steady, steady, steady}, 2.0, n) == Approx(0.0).margin(1e-12));
}

TEST_CASE("straggler_share: a slower core is the slowest as soon as it takes part", "[predict]") {
    const std::vector<double> fast(101, 1.0), slow(101, 1.5);
    // Two measured ranks, N = 2: both take part in every step, the slow one sets the pace: 50 % over the base.
    CHECK(straggler_share({fast, slow}, 1.0, 2) == Approx(0.5));
    // N = 1: half the draws are the slow core: E[step] = 1.25.
    CHECK(straggler_share({fast, slow}, 1.0, 1) == Approx(0.25).epsilon(0.03));
    // Beyond the measured ranks, drawn with replacement: at N = 8 all fast has probability 1/256.
    CHECK(straggler_share({fast, slow}, 1.0, 8) == Approx(0.5 * (1 - 1.0 / 256)).epsilon(0.01));
    // The base is the profiled rank's step: measured against the slow rank, nobody is slower.
    CHECK(straggler_share({fast, slow}, 1.5, 2) == Approx(0.0).margin(1e-12));
}

TEST_CASE("straggler_share: step-to-step jitter, the expected maximum of N uniform draws", "[predict]") {
    // Each step's work uniform on [1, 2]: E[max of N] = 1 + N / (N + 1).
    std::vector<double> uniform;
    for (int i = 0; i <= 100; ++i) uniform.push_back(1.0 + i / 100.0);
    const std::vector<std::vector<double>> ranks{uniform, uniform, uniform, uniform};
    double previous = -1;
    for (int n : {1, 2, 4, 16, 64}) {
        INFO("N = " << n);
        const double expected = 1.0 + n / (n + 1.0);
        CHECK(straggler_share(ranks, 1.5, n) == Approx(expected / 1.5 - 1.0).margin(0.01));
        CHECK(straggler_share(ranks, 1.5, n) >= previous);  // more ranks wait for a slower one
        previous = straggler_share(ranks, 1.5, n);
    }
    // Reproducible: the same inputs and seed give the same share.
    CHECK(straggler_share(ranks, 1.5, 16, 7) == straggler_share(ranks, 1.5, 16, 7));
}

TEST_CASE("straggler_share beyond the measured ranks: the mixture's exact maximum, in no time at any N", "[predict]") {
    // Two measured ranks, one of whose steps ramp up to 3x in its top percent: at N ranks drawn from them, the share
    // rises with N towards +200 % (someone is always at the top).
    std::vector<double> steady(101, 1.0), hiccup;
    for (int i = 0; i < 100; ++i) hiccup.push_back(1.0);
    hiccup.push_back(3.0);  // the last gap (1 %) ramps up to it: mean excess 1 over that percent
    const std::vector<std::vector<double>> ranks{steady, hiccup};
    const double n1000 = straggler_share(ranks, 1.0, 1000), n1e6 = straggler_share(ranks, 1.0, 1000000);
    CHECK(n1000 > straggler_share(ranks, 1.0, 10));
    CHECK(n1e6 == Approx(2.0).margin(0.01));  // every step someone is at the top: the maximum
    CHECK(n1000 < n1e6);
}

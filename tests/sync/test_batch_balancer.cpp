// sync.balance: the split by speed on hand-made inputs, and BatchBalancer over real ranks (every rank decides the
// same split, the slower rank gets fewer samples, noise below the threshold moves nothing).
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/sync/batch_balancer.hpp"
#include "comm/serial_reference.hpp"

using namespace ringtrain;
using rt_test::world_rank;
using rt_test::world_size;
using sync::split_by_speed;

namespace {

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

}  // namespace

TEST_CASE("split_by_speed: in proportion to speed, whole samples, summing to the global batch", "[balance]") {
    CHECK(split_by_speed(std::vector<double>{1e-4}, 64, 16) == std::vector<int64_t>{64});
    CHECK(split_by_speed(std::vector<double>{1e-4, 1e-4}, 128, 16) == std::vector<int64_t>{64, 64});
    // Twice the time per sample: half the samples.
    CHECK(split_by_speed(std::vector<double>{2e-4, 1e-4}, 96, 1) == std::vector<int64_t>{32, 64});
    CHECK(split_by_speed(std::vector<double>{1.0, 2.0, 4.0}, 70, 1) == std::vector<int64_t>{40, 20, 10});
    // An awkward total: the leftover sample goes to the largest remainder, ties to the lower rank.
    CHECK(split_by_speed(std::vector<double>{1.0, 1.0, 1.0}, 7, 1) == std::vector<int64_t>{3, 2, 2});
    CHECK(split_by_speed(std::vector<double>{1.0, 1.0}, 9, 0) == std::vector<int64_t>{5, 4});
}

TEST_CASE("split_by_speed: no rank below the floor, the rest still by speed", "[balance]") {
    // Rank 0 is 100x slower: its proportional share (~1.3) is under the floor 16; the other two share 112 evenly.
    CHECK(split_by_speed(std::vector<double>{100.0, 1.0, 1.0}, 128, 16) == std::vector<int64_t>{16, 56, 56});
    // Two slow ranks pinned, the fast one takes what is left.
    CHECK(split_by_speed(std::vector<double>{50.0, 60.0, 1.0}, 100, 10) == std::vector<int64_t>{10, 10, 80});
    // Exactly the floor for everyone.
    CHECK(split_by_speed(std::vector<double>{1.0, 3.0}, 20, 10) == std::vector<int64_t>{10, 10});
}

TEST_CASE("split_by_speed: random speeds keep the sum, the floor and the proportion to within one sample",
          "[balance]") {
    Rng rng(42);
    for (int trial = 0; trial < 2000; ++trial) {
        const size_t n = 1 + rng.below(8);
        const int64_t batch = 1 + static_cast<int64_t>(rng.below(300));
        const int64_t total = batch * static_cast<int64_t>(n);
        const int64_t floor = std::max<int64_t>(1, batch / 4);
        std::vector<double> s(n);
        for (double& x : s) x = 1e-5 * (0.5 + 1.5 * rng.uniform());  // speeds within 3x of each other
        CAPTURE(trial, n, batch);
        const auto c = split_by_speed(s, total, floor);
        REQUIRE(c.size() == n);
        REQUIRE(sum(c) == total);
        double speed_sum = 0;
        for (double x : s) speed_sum += 1 / x;
        bool any_pinned = false;
        for (size_t r = 0; r < n; ++r) {
            REQUIRE(c[r] >= floor);
            any_pinned = any_pinned || total * (1 / s[r]) / speed_sum < floor;
        }
        if (!any_pinned)
            for (size_t r = 0; r < n; ++r) REQUIRE(std::fabs(c[r] - total * (1 / s[r]) / speed_sum) < 1.0);
    }
}

TEST_CASE("split_by_speed: refuses what cannot be split", "[balance]") {
    CHECK_THROWS_AS(split_by_speed(std::vector<double>{1.0, 1.0}, 10, 6), Error);
    CHECK_THROWS_AS(split_by_speed(std::vector<double>{1.0, 0.0}, 10, 1), Error);
    CHECK_THROWS_AS(split_by_speed(std::vector<double>{1.0, std::nan("")}, 10, 1), Error);
    CHECK_THROWS_AS(split_by_speed(std::vector<double>{}, 10, 1), Error);
}

TEST_CASE("BatchBalancer: every rank decides the same split, the slower rank reads less", "[balance][mpi]") {
    const int n = world_size(), me = world_rank();
    auto comm = comm::make_communicator("ring");
    const int64_t B = 48;
    sync::BatchBalancer bal(*comm, B);
    REQUIRE(bal.counts() == std::vector<int64_t>(static_cast<size_t>(n), B));
    // Rank r takes (r + 1) x 10 us per sample: rank 0 is the fastest. Work of 0.5-3 ms a step: an exchange every
    // step or two (about every 2 ms of the slowest rank's work).
    auto step = [&](int64_t samples) {
        const double per_sample = (me + 1) * 1e-5;
        bal.record(per_sample * static_cast<double>(samples), samples);
    };
    int64_t exchanges = 0;
    bool changed = false;
    for (int i = 0; i < 12; ++i) {
        step(bal.counts()[static_cast<size_t>(me)]);
        if (bal.due()) {
            changed = bal.exchange() || changed;
            ++exchanges;
        }
    }
    CHECK(exchanges == bal.stats().exchanges);
    REQUIRE(exchanges >= 2);
    // The same counts on every rank (rank 0's, broadcast, compared).
    std::vector<float> mine(bal.counts().begin(), bal.counts().end());
    std::vector<float> root = mine;
    comm->broadcast(std::span<float>(root), 0);
    CHECK(mine == root);
    REQUIRE(sum(bal.counts()) == B * n);
    if (n == 1) {
        CHECK_FALSE(changed);
        return;
    }
    CHECK(changed);
    // Proportional to 1/(r+1), none under B/4 = 12.
    double speed_sum = 0;
    for (int r = 0; r < n; ++r) speed_sum += 1.0 / (r + 1);
    for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        const double want = std::max(12.0, B * n * (1.0 / (r + 1)) / speed_sum);
        CHECK(std::fabs(bal.counts()[static_cast<size_t>(r)] - want) <= 2.0);
        if (r > 0) CHECK(bal.counts()[static_cast<size_t>(r)] < bal.counts()[static_cast<size_t>(r - 1)]);
    }
    CHECK(bal.stats().batch_max[0] > B);
    CHECK(bal.stats().batch_min[static_cast<size_t>(n - 1)] < B);
    // The samples each rank reported, summed by the exchanges (the first step is not a measurement).
    CHECK(sum(bal.stats().samples) > 0);
}

TEST_CASE("BatchBalancer: speeds within a few per cent move nothing", "[balance][mpi]") {
    const int n = world_size(), me = world_rank();
    auto comm = comm::make_communicator("ring");
    sync::BatchBalancer bal(*comm, 64);
    // 3 % apart: a split by speed would differ by a sample or two, for a predicted step under 4 % shorter.
    for (int i = 0; i < 10; ++i) {
        bal.record((1.0 + 0.03 * me) * 1e-3, 64);
        if (bal.due()) CHECK_FALSE(bal.exchange());
    }
    CHECK(bal.counts() == std::vector<int64_t>(static_cast<size_t>(n), 64));
}

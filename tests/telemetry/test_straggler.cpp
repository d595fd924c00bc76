// The straggler analysis against hand-computed cases, and the bounded per-step log.
#include <catch2/catch.hpp>

#include "ringtrain/telemetry/straggler.hpp"

using namespace ringtrain::telemetry;

TEST_CASE("analyse_stragglers sums slowest-minus-mean over the steps every rank measured", "[telemetry]") {
    // Step 0: rank 1 slowest by 0.5 over the mean; step 1: rank 0 by 1.0; step 2: a tie (first rank counts), 0.
    // Rank 1's fourth entry has no partner and is left out.
    const StragglerReport r = analyse_stragglers({{1.0f, 3.0f, 2.0f}, {2.0f, 1.0f, 2.0f, 9.0f}});
    CHECK(r.steps == 3);
    CHECK(r.straggler_s == Approx(1.5));
    CHECK(r.work_s == Approx(1.5 + 2.0 + 2.0));
    CHECK(r.slowest_steps_per_rank == std::vector<int64_t>{2, 1});
    REQUIRE(r.wait_caused_s_per_rank.size() == 2);  // rank 0: 1.0 in step 1 (and the tie's 0); rank 1: 0.5
    CHECK(r.wait_caused_s_per_rank[0] == Approx(1.0));
    CHECK(r.wait_caused_s_per_rank[1] == Approx(0.5));
    REQUIRE(r.mean_work_ms_per_rank.size() == 2);
    CHECK(r.mean_work_ms_per_rank[0] == Approx(2000.0));
    CHECK(r.mean_work_ms_per_rank[1] == Approx(5000.0 / 3));
}

TEST_CASE("analyse_stragglers: three ranks, one always slow", "[telemetry]") {
    const StragglerReport r = analyse_stragglers({{1.0f, 1.0f}, {1.0f, 1.0f}, {4.0f, 2.5f}});
    CHECK(r.steps == 2);
    CHECK(r.straggler_s == Approx((4.0 - 2.0) + (2.5 - 1.5)));
    CHECK(r.slowest_steps_per_rank == std::vector<int64_t>{0, 0, 2});
    CHECK(r.wait_caused_s_per_rank[2] == Approx(3.0));
    CHECK(r.wait_caused_s_per_rank[0] == 0.0);
}

TEST_CASE("analyse_stragglers: one rank, empty and missing logs", "[telemetry]") {
    const StragglerReport one = analyse_stragglers({{0.25f, 0.5f}});
    CHECK(one.steps == 2);
    CHECK(one.straggler_s == 0.0);
    CHECK(one.slowest_steps_per_rank == std::vector<int64_t>{2});
    CHECK(analyse_stragglers({}).steps == 0);
    const StragglerReport gpu_rank = analyse_stragglers({{1.0f, 2.0f}, {}});
    CHECK(gpu_rank.steps == 0);
    CHECK(gpu_rank.straggler_s == 0.0);
}

TEST_CASE("StepWorkLog keeps the first capacity steps and counts the rest", "[telemetry]") {
    StepWorkLog log(2);
    log.record(0.5);
    log.record(0.25);
    log.record(1.0);
    REQUIRE(log.seconds().size() == 2);
    CHECK(log.seconds()[0] == 0.5f);
    CHECK(log.seconds()[1] == 0.25f);
    CHECK(log.dropped() == 1);
}

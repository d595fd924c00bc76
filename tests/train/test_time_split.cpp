// The closing line of a multi-rank run, from hand-made summaries.
#include <catch2/catch.hpp>

#include "ringtrain/train/time_split.hpp"

using ringtrain::train::describe_time_split;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

json summary(int world) {
    return {{"world_size", world},
            {"phase_s", {{"data", 1.0}, {"forward", 3.0}, {"backward", 4.0}, {"sync_wait", 1.5}, {"optimizer", 0.5}}}};
}

}  // namespace

TEST_CASE("the time split names each phase's share of rank 0's step time", "[train]") {
    const std::string line = describe_time_split(summary(2));
    CHECK_THAT(line, Contains("forward+backward 70.0 %"));
    CHECK_THAT(line, Contains("input 10.0 %"));
    CHECK_THAT(line, Contains("optimizer 5.0 %"));
    CHECK_THAT(line, Contains("waiting for gradients 15.0 %"));
    CHECK(line.find("slowest") == std::string::npos);  // no straggler report, no claim about it
}

TEST_CASE("the time split adds the straggler share and the rank most often last", "[train]") {
    json s = summary(3);
    s["stragglers"] = {{"steps", 200}, {"wait_for_slowest_fraction", 0.083}, {"slowest_steps_per_rank", {20, 150, 30}}};
    const std::string line = describe_time_split(s);
    CHECK_THAT(line, Contains("uneven local work cost 8.3 % of the run"));
    CHECK_THAT(line, Contains("rank 1 was the slowest in 75 % of the steps"));
}

TEST_CASE("the time split names the rank that caused the most wait, not the first of ranks last equally often", "[train]") {
    // The throttled rank of the straggler test in a loaded CI run (2026-11-27): last in 10 of 20 steps, like rank 0,
    // and 4x rank 0's mean work.
    json s = summary(2);
    s["stragglers"] = {{"steps", 20},
                       {"wait_for_slowest_fraction", 0.354},
                       {"slowest_steps_per_rank", {10, 10}},
                       {"wait_caused_s_per_rank", {0.05, 0.74}}};
    const std::string line = describe_time_split(s);
    CHECK_THAT(line, Contains("rank 1 was the slowest in 50 % of the steps and caused 94 % of that wait)"));
}

TEST_CASE("no time split for one rank, a summary without phases, or an unmeasured straggler block", "[train]") {
    CHECK(describe_time_split(summary(1)).empty());
    CHECK(describe_time_split(json{{"world_size", 2}}).empty());
    json s = summary(2);
    s["stragglers"] = {{"steps", 0}, {"why", "sync.mode local_sgd has no per-step synchronisation"}};
    const std::string line = describe_time_split(s);
    CHECK_THAT(line, Contains("waiting for gradients"));
    CHECK(line.find("slowest") == std::string::npos);
}

TEST_CASE("a rank slowest in most steps, costing a tenth of the run, gets the sync.balance hint", "[train][balance]") {
    const std::string hint = "--set sync.balance=speed";
    json s = summary(2);
    s["device"] = "cpu";
    s["sync"] = {{"mode", "allreduce"}, {"balance", {{"mode", "off"}}}};
    s["stragglers"] = {{"steps", 100}, {"wait_for_slowest_fraction", 0.21}, {"slowest_steps_per_rank", {5, 95}}};
    CHECK_THAT(describe_time_split(s), Contains(hint));
    // Not when it is already on, on a GPU, in local SGD, when the wait is small, or when the last rank changes.
    json on = s;
    on["sync"]["balance"]["mode"] = "speed";
    CHECK_THAT(describe_time_split(on), !Contains(hint));
    json gpu = s;
    gpu["device"] = "cuda";
    CHECK_THAT(describe_time_split(gpu), !Contains(hint));
    json local = s;
    local["sync"]["mode"] = "local_sgd";
    CHECK_THAT(describe_time_split(local), !Contains(hint));
    json small = s;
    small["stragglers"]["wait_for_slowest_fraction"] = 0.05;
    CHECK_THAT(describe_time_split(small), !Contains(hint));
    json noise = s;
    noise["stragglers"]["slowest_steps_per_rank"] = {45, 55};
    noise["stragglers"]["mean_work_ms_per_rank"] = {10.0, 10.6};
    CHECK_THAT(describe_time_split(noise), !Contains(hint));
}

TEST_CASE("ranks whose mean work differs by 15 % get the sync.balance hint though none is always last", "[train][balance]") {
    // The MNIST CNN at 4 ranks on the H200 host (bench/RESULTS.md, 2026-11-27): ranks 2 and 3 took turns at being last.
    const std::string hint = "--set sync.balance=speed";
    json s = summary(4);
    s["device"] = "cpu";
    s["sync"] = {{"mode", "allreduce"}, {"balance", {{"mode", "off"}}}};
    s["stragglers"] = {{"steps", 40},
                       {"wait_for_slowest_fraction", 0.18},
                       {"slowest_steps_per_rank", {0, 4, 20, 16}},
                       {"mean_work_ms_per_rank", {61.6, 66.4, 101.5, 101.2}}};
    CHECK_THAT(describe_time_split(s), Contains(hint));
    json close = s;
    close["stragglers"]["mean_work_ms_per_rank"] = {61.6, 66.4, 69.0, 70.0};  // 14 % apart: jitter, not speed
    CHECK_THAT(describe_time_split(close), !Contains(hint));
    json small = s;
    small["stragglers"]["wait_for_slowest_fraction"] = 0.08;
    CHECK_THAT(describe_time_split(small), !Contains(hint));
}

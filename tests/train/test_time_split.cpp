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

TEST_CASE("no time split for one rank, a summary without phases, or an unmeasured straggler block", "[train]") {
    CHECK(describe_time_split(summary(1)).empty());
    CHECK(describe_time_split(json{{"world_size", 2}}).empty());
    json s = summary(2);
    s["stragglers"] = {{"steps", 0}, {"why", "sync.mode local_sgd has no per-step synchronisation"}};
    const std::string line = describe_time_split(s);
    CHECK_THAT(line, Contains("waiting for gradients"));
    CHECK(line.find("slowest") == std::string::npos);
}

// The one line a multi-rank run ends with: where rank 0's step time went, and how much of the gradient wait was
// spent waiting for the slowest rank rather than for the network. Built from summary.json, printed by the CLI.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ringtrain::train {

// "" for a single-rank run or a summary without phase times.
std::string describe_time_split(const nlohmann::json& summary);

}  // namespace ringtrain::train

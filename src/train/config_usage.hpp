// Keys that the chosen format, optimizer, schedule or sync settings never read. A value there is a mistake more often
// than not (momentum given to Adam, gamma to a cosine schedule, data.dir to synthetic data), and a key that is
// accepted and then ignored is a silent fallback: refused, naming the key.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/train/run_plan.hpp"
#include "config_key_origin.hpp"

namespace ringtrain::train::detail {

// Throws InputError for the first key given with a value other than its default that the plan never reads. One case
// is a note instead: the value is in the config file and a --set changed a key that decides its use (a sweep varying
// optimizer.name over a file written for one optimizer). Returns those notes, one line each.
std::vector<std::string> check_unused_keys(const KeyOrigin& origin, const RunPlan& plan, const nlohmann::json& doc);

}  // namespace ringtrain::train::detail

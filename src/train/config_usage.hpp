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

struct UnreadKey {
    std::string key;   // dotted
    std::string note;  // one line, for rank 0 to print
};

// Throws InputError for the first key given with a value other than its default that `plan` never reads. One case
// is a note instead: the value is in the config file, `file_plan` (the file's own settings, before any --set) reads
// it, and a --set changed what decides its use (a sweep varying optimizer.name or data.format over one file).
// Returns those keys; the caller sets them back to their defaults, so the resolved config says what ran.
std::vector<UnreadKey> check_unused_keys(const KeyOrigin& origin, const RunPlan& plan, const nlohmann::json& doc,
                                         const RunPlan* file_plan);

}  // namespace ringtrain::train::detail

// The config schema: every key a config may hold, its type, default, range and one line of help. Split by
// section so each section's keys read together; Config (config.cpp) checks documents against it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ringtrain::train::detail {

enum class Kind { Int, Number, Bool, String, IntArray };

// A schema row, written with designated initialisers; every member has a default so a row names only what it sets.
struct KeySpec {
    Kind kind = Kind::String;
    nlohmann::json fallback = nullptr;  // null with nullable = false means required
    std::optional<double> min = std::nullopt, max = std::nullopt;
    std::vector<std::string> choices = {};  // allowed spellings (from the RunPlan enum the key parses into)
    bool nullable = false;
    bool nonempty = false;  // strings: "" is refused (e.g. an output folder of "" would mean the current one, or /)
    const char* doc = "";
};

// All keys, by full dotted name.
const std::map<std::string, KeySpec>& schema();

}  // namespace ringtrain::train::detail

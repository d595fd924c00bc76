// Reading the project's own JSON files (configs, model files) strictly. nlohmann's defaults take the last of two
// equal keys, turn a number too large for a double into a raw exception, and build values of any depth, which
// later recursive code (dump, destruction in older versions) can overflow the stack on. Here each of those is an
// InputError (exit code 2) naming the file and the JSON path of the value.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ringtrain {

// Deeper than any config or model file needs; far below what recursion over a value can take.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; `source` names it in messages ("configs/a.json"). Throws InputError "<source>: <path>: ..." for a
// duplicate key, a value nested deeper than kMaxJsonDepth, a number out of range, or a syntax error.
nlohmann::json parse_json_strictly(const std::string& text, const std::string& source);

// Reads and parses the file at `path` (as parse_json_strictly). `what` ("config file") and `hint` ("pass an
// existing file") complete the messages for a missing, unreadable or non-regular file.
nlohmann::json read_json_file(const std::string& path, const std::string& what, const std::string& hint);

// A value for a one-line message: compact, invalid UTF-8 replaced, cut to about `max_chars` characters.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 80);
// nlohmann's own message minus its "[json.exception.out_of_range.403] " prefix, for an error line a user reads.
std::string without_exception_id(const std::string& what);

}  // namespace ringtrain

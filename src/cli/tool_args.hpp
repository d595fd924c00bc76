// The command line of the one-process tools (make-clicklog, make-image-folder): `--flag value` pairs, each flag
// known and given at most once, numbers parsed whole, and the one-line error with its exit code.
#pragma once

#include <charconv>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <type_traits>

#include "ringtrain/core/error.hpp"

namespace ringtrain::cli {

struct ToolArgs : std::map<std::string, std::string> {
    bool help = false;  // --help or -h: print the usage, exit 0
};

// Reads argv[2..] for `tool` (errors say "see `ringtrain TOOL --help`"); refuses a run under mpirun (world_size > 1)
// with "TOOL writes WHAT: run it as one process".
ToolArgs parse_tool_args(const std::string& tool, int argc, char** argv, std::initializer_list<const char*> known,
                         int world_size, const std::string& what);

// `text` as a whole number of type T, or an InputError naming the tool and flag.
template <class T>
T tool_number(const std::string& tool, const std::string& flag, const std::string& text) {
    T v{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if constexpr (std::is_unsigned_v<T>)  // "-0" (also "-00") is zero, a number in range
        if (text.size() > 1 && text[0] == '-' && text.find_first_not_of('0', 1) == std::string::npos) return T{0};
    if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
        // An unsigned flag given a negative number is a number, only out of range: say so.
        if constexpr (std::is_unsigned_v<T>)
            if (!text.empty() && text[0] == '-' && text.size() > 1 &&
                text.find_first_not_of("0123456789", 1) == std::string::npos)
                throw InputError(tool + ": " + flag + ": " + text + " is negative; it must be >= 0; see `ringtrain " +
                                 tool + " --help`");
        throw InputError(tool + ": " + flag + ": '" + text + "' is not a number; see `ringtrain " + tool + " --help`");
    }
    return v;
}

// Runs body; an InputError is one line and exit 2, any other exception one line and exit 1. Under mpirun
// (world_rank >= 0) the ranks share the input, so an InputError is printed by rank 0 alone, and any other error
// names the rank it happened on.
int run_tool(const std::function<int()>& body, int world_rank = -1);

}  // namespace ringtrain::cli

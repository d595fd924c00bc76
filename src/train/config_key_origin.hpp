// Where a config key's value came from: the `--set KEY=VALUE` that set it, the config file, or the schema's default.
// The checks across keys name the key they refuse, so a value given on the command line is never blamed on a file
// that may hold a valid one.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>

namespace ringtrain::train::detail {

class KeyOrigin {
public:
    KeyOrigin(std::string file, const std::map<std::string, std::string>& overrides, std::set<std::string> given)
        : file_(std::move(file)), overrides_(overrides), given_(std::move(given)) {}
    // "--set KEY=VALUE" for a key set on the command line, else the config file's name.
    std::string operator()(const std::string& key) const {
        const auto it = overrides_.find(key);
        return it == overrides_.end() ? file_ : "--set " + it->second;
    }
    // Whether the file or a --set gave the key (not its default).
    bool given(const std::string& key) const { return given_.count(key) != 0; }
    bool from_set(const std::string& key) const { return overrides_.count(key) != 0; }
    const std::string& file() const { return file_; }

private:
    std::string file_;
    const std::map<std::string, std::string>& overrides_;
    std::set<std::string> given_;
};

}  // namespace ringtrain::train::detail

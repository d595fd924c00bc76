// The in-process trainer tests' config: fixtures.hpp's tiny run as a typed Config.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixtures.hpp"
#include "ringtrain/train/config.hpp"

namespace rt_test {

// tiny_config's run of dir/tiny.json into dir/out, plus `extra`, as a typed Config.
inline ringtrain::train::Config tiny_run(const std::string& dir, const std::string& extra,
                                         const std::vector<std::string>& overrides = {}) {
    return ringtrain::train::Config::from_json(
        nlohmann::json::parse(tiny_config(dir + "/tiny.json", dir + "/out", extra)), "test", overrides);
}

}  // namespace rt_test

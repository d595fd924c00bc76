// metrics.jsonl's writer when writes fail: the run goes on, a half-written line is cut off again, later lines are
// written once writing works again, and the lost lines are counted.
#include <catch2/catch.hpp>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/telemetry/metrics_writer.hpp"

using ringtrain::telemetry::MetricsWriter;
using nlohmann::json;

namespace {

std::vector<std::string> lines_of(const std::string& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
}

// Makes writes past `bytes` fail (EFBIG; SIGXFSZ ignored) for its lifetime.
struct FileSizeLimit {
    explicit FileSizeLimit(rlim_t bytes) {
        getrlimit(RLIMIT_FSIZE, &saved);
        old_handler = std::signal(SIGXFSZ, SIG_IGN);
        rlimit r = saved;
        r.rlim_cur = bytes;
        setrlimit(RLIMIT_FSIZE, &r);
    }
    ~FileSizeLimit() {
        setrlimit(RLIMIT_FSIZE, &saved);
        std::signal(SIGXFSZ, old_handler);
    }
    rlimit saved{};
    void (*old_handler)(int) = nullptr;
};

}  // namespace

TEST_CASE("MetricsWriter: a line that cannot be written whole is cut off, counted, and later lines still land",
          "[telemetry][metrics]") {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("rt-metrics-" + std::to_string(::getpid()) + ".jsonl")).string();
    {
        MetricsWriter w(path, false);
        w.write({{"step", 1}});
        const auto size = std::filesystem::file_size(path);
        {
            FileSizeLimit limit(size + 10);  // room for part of the next line only
            w.write({{"step", 2}, {"padding", std::string(100, 'x')}});
            w.write({{"step", 3}});  // no room at all... or a little: either way not whole
        }
        CHECK(std::filesystem::file_size(path) <= size + 10);
        w.write({{"step", 4}});  // writing works again
        CHECK(w.lines_lost() >= 1);
        CHECK(w.lines_lost() <= 2);
    }
    const std::vector<std::string> lines = lines_of(path);
    REQUIRE_FALSE(lines.empty());
    for (const std::string& l : lines) CHECK_NOTHROW(json::parse(l));  // no half line left behind
    CHECK(json::parse(lines.front())["step"] == 1);
    CHECK(json::parse(lines.back())["step"] == 4);
    std::filesystem::remove(path);
}

TEST_CASE("MetricsWriter: a device that refuses every write loses the lines without throwing", "[telemetry][metrics]") {
    REQUIRE(std::filesystem::exists("/dev/full"));  // Linux always has it
    MetricsWriter w("/dev/full", true);
    CHECK_NOTHROW(w.write({{"step", 1}}));
    CHECK_NOTHROW(w.write({{"step", 2}}));
    CHECK(w.lines_lost() == 2);
}

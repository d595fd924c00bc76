// A fresh folder under the system temp dir for one test, removed (with its files) when the test ends.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace rt_test {

// Paths a test process made under the temp dir by name (temp_dir, the fuzz drivers' input file), removed when the
// process exits, however its tests went: CI and developers run the suites again and again, and each run used to leave
// ~30 MB behind. RINGTRAIN_KEEP_TEST_FILES=1 keeps them, to look at a failure. A forked child does not remove its
// parent's paths.
class ExitCleanup {
public:
    static ExitCleanup& instance() {
        static ExitCleanup cleanup;
        return cleanup;
    }
    void add(const std::filesystem::path& path) {
        std::lock_guard<std::mutex> lock(mutex_);
        paths_.push_back(path);
    }
    ~ExitCleanup() {
        const char* keep = std::getenv("RINGTRAIN_KEEP_TEST_FILES");
        if (::getpid() != owner_ || (keep && std::string(keep) == "1")) return;
        std::error_code ec;
        for (const auto& p : paths_) std::filesystem::remove_all(p, ec);
    }

private:
    ExitCleanup() = default;
    pid_t owner_ = ::getpid();
    std::mutex mutex_;
    std::vector<std::filesystem::path> paths_;
};

// A fresh, empty folder under the temp dir named for one test and this process; it lives until the process exits.
inline std::string named_temp_dir(const std::string& prefix, const std::string& name) {
    const auto p = std::filesystem::temp_directory_path() / (prefix + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
    ExitCleanup::instance().add(p);
    return p.string();
}

struct TempDir {
    std::filesystem::path path;
    explicit TempDir(const std::string& kind = "data") {
        static std::atomic<int> counter{0};
        path = std::filesystem::temp_directory_path() /
               ("ringtrain_test_" + kind + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace rt_test

// A fresh folder under the system temp dir for one test, removed (with its files) when the test ends.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

namespace rt_test {

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

// Helpers for tests that run the ringtrain binary (directly or under mpirun) and inspect what it wrote.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/temp_dir.hpp"

namespace rt_test {

struct CommandResult {
    int exit_code = -1;
    std::string output;  // stdout and stderr together
    double seconds = 0;
};

inline CommandResult run_command(const std::string& cmd) {
    CommandResult r;
    const auto t0 = std::chrono::steady_clock::now();
    FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
    if (!pipe) return r;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
    const int status = pclose(pipe);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

inline std::string binary() { return RINGTRAIN_BINARY; }
inline std::string source_dir() { return RINGTRAIN_SOURCE_DIR; }

// mpirun with the flags CI needs (root, more ranks than cores, shared memory + TCP only).
inline std::string mpirun(int ranks) {
    return "mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader,tcp -np " +
           std::to_string(ranks) + " ";
}

// A fresh, empty temporary directory for one test, removed when the test process exits (support/temp_dir.hpp).
inline std::string temp_dir(const std::string& name) { return named_temp_dir("ringtrain-test-", name); }

inline void write_file(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
}

inline nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
    std::ifstream in(path);
    std::vector<nlohmann::json> v;
    std::string line;
    while (std::getline(in, line))
        if (!line.empty()) v.push_back(nlohmann::json::parse(line));
    return v;
}

// The parameter tensors (in model order) of a ringtrain checkpoint, concatenated; optimizer state excluded.
inline std::vector<float> checkpoint_parameters(const std::string& path, size_t parameter_tensors) {
    std::ifstream in(path, std::ios::binary);
    char magic[8];
    uint64_t len = 0;
    in.read(magic, 8);
    in.read(reinterpret_cast<char*>(&len), 8);
    std::string text(len, '\0');
    in.read(text.data(), static_cast<std::streamsize>(len));
    const auto header = nlohmann::json::parse(text);
    std::vector<float> out;
    size_t i = 0;
    for (const auto& t : header["tensors"]) {
        if (i++ == parameter_tensors) break;
        size_t n = 1;
        for (auto d : t["shape"]) n *= d.get<size_t>();
        std::vector<float> buf(n);
        in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(n * 4));
        out.insert(out.end(), buf.begin(), buf.end());
    }
    return out;
}

}  // namespace rt_test

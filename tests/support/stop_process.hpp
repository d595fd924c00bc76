// Helpers for the graceful-stop process tests (dense and sparse path): wait until a run under mpirun has logged a
// few steps, signal one rank's process, and read back the step summary.json says it stopped at.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace rt_test {

inline size_t lines_in(const std::string& path) {
    std::ifstream in(path);
    size_t n = 0;
    std::string line;
    while (std::getline(in, line)) ++n;
    return n;
}

inline pid_t read_pid(const std::string& path) {
    std::ifstream in(path);
    pid_t p = 0;
    in >> p;
    return p;
}

// Waits (up to 60 s) until rank 0 has logged a few steps and `pid_file` names a process, then sends it SIGUSR1.
inline bool signal_mid_run(const std::string& metrics, const std::string& pid_file) {
    for (int i = 0; i < 12000; ++i) {
        if (lines_in(metrics) >= 2 && read_pid(pid_file) > 0) return kill(read_pid(pid_file), SIGUSR1) == 0;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
}

// N from summary.json's "stopped": "signal SIGUSR1 at step N"; -1 when it says anything else.
inline int64_t stopped_step(const nlohmann::json& summary) {
    std::smatch m;
    const std::string s = summary["stopped"].is_string() ? summary["stopped"].get<std::string>() : "";
    if (!std::regex_match(s, m, std::regex("signal SIGUSR1 at step ([0-9]+)"))) return -1;
    return std::stoll(m[1]);
}

}  // namespace rt_test

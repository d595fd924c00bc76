// Helpers for the graceful-stop process tests (dense and sparse path): wait until a run under mpirun has logged a
// few steps, signal one rank's process, and read back the step summary.json says it stopped at.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>

#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ringtrain/train/checkpoint.hpp"
#include "support/run_command.hpp"

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

// `ringtrain train --config cfg ARGS` under mpirun -np 2, each rank's shell writing its pid to dir/pid.R before it
// becomes ringtrain (so a test can signal one rank's process).
inline std::string mpirun_train_with_pid_files(const std::string& dir, const std::string& cfg,
                                               const std::string& args = "") {
    return mpirun(2) + "sh -c 'echo $$ > " + dir + "/pid.$OMPI_COMM_WORLD_RANK; exec " + binary() + " train --config " +
           cfg + args + "'";
}

// Waits (up to 60 s) until rank 0 has logged a few steps and `pid_file` names a process, then sends it SIGUSR1.
inline bool signal_mid_run(const std::string& metrics, const std::string& pid_file) {
    for (int i = 0; i < 12000; ++i) {
        if (lines_in(metrics) >= 2 && read_pid(pid_file) > 0) return kill(read_pid(pid_file), SIGUSR1) == 0;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
}

// True once `pid` is in the stopped state ('T' in /proc/PID/stat): kill(SIGSTOP) returns before the target has
// stopped, and a test that signals a peer next must know the frozen rank can no longer take part (waits up to 5 s).
inline bool wait_until_stopped(pid_t pid) {
    for (int i = 0; i < 1000; ++i) {
        std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
        std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const auto close = stat.rfind(')');
        if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T') return true;
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

// The graceful stop end to end under mpirun -np 2, for config `cfg` whose output.dir is dir/out: each rank's shell
// writes its pid to dir/pid.R and becomes ringtrain; SIGUSR1 goes to rank 1 mid-run. The stopped job must exit 3
// with the stop line and the resume hint, "stopped", a checkpoint and the last metrics line at the agreed step;
// checkpoint.resume=auto must then finish all total_steps with the uninterrupted run's parameter hashes.
inline void check_stop_one_rank_then_resume(const std::string& dir, const std::string& cfg, const std::string& out,
                                            int64_t total_steps, const nlohmann::json& reference) {
    const std::string out_dir = dir + "/" + out;
    const std::string launch = mpirun_train_with_pid_files(dir, cfg);
    CommandResult stopped;
    std::thread job([&] { stopped = run_command(launch); });
    const bool sent = signal_mid_run(out_dir + "/metrics.jsonl", dir + "/pid.1");
    job.join();
    REQUIRE(sent);
    INFO(stopped.output);
    CHECK(stopped.exit_code == 3);
    CHECK(stopped.output.find("ringtrain: stopped by signal SIGUSR1 at step ") != std::string::npos);
    CHECK(stopped.output.find("continue with --set checkpoint.resume=auto (exit 3)") != std::string::npos);
    const auto summary = read_json(out_dir + "/summary.json");
    const int64_t step = stopped_step(summary);
    CHECK(step > 0);
    CHECK(step < total_steps);
    CHECK(summary["steps"] == step);
    CHECK(std::filesystem::exists(out_dir + "/checkpoints/" + ringtrain::train::checkpoint_file_name(step)));
    CHECK(read_jsonl(out_dir + "/metrics.jsonl").back()["global_step"] == step);

    const auto resumed = run_command(mpirun(2) + binary() + " train --config " + cfg + " --set checkpoint.resume=auto");
    INFO(resumed.output);
    CHECK(resumed.exit_code == 0);
    const auto after = read_json(out_dir + "/summary.json");
    CHECK(after["stopped"].is_null());
    CHECK(after["steps"] == total_steps);
    CHECK(after["parameter_hash_per_rank"] == reference);
}

// The stall watchdog end to end: `launch` runs a job under mpirun whose ranks write dir/pid.R (`timeout 60` in
// front, so a job the watchdog fails to end exits 124 instead of hanging the test); once rank 0's `metrics` has
// `min_lines` lines, rank `rank` is frozen (SIGSTOP). The job must end on its own within 30 s of the freeze, having
// printed rank 0's warning (naming the wait; the late rank where the shared-memory barrier knows it) and the abort
// at `abort_limit` ("3" for sync.stall_abort_s = 3).
inline void check_frozen_rank_ends_job(const std::string& launch, const std::string& dir, const std::string& metrics,
                                       size_t min_lines, int rank, const std::string& abort_limit) {
    const std::string pid_file = dir + "/pid." + std::to_string(rank);
    CommandResult ended;
    std::thread job([&] { ended = run_command(launch); });
    bool frozen = false;
    std::chrono::steady_clock::time_point frozen_at;
    for (int i = 0; i < 12000 && !frozen; ++i) {
        if (lines_in(metrics) >= min_lines && read_pid(pid_file) > 0) {
            frozen = kill(read_pid(pid_file), SIGSTOP) == 0 && wait_until_stopped(read_pid(pid_file));
            frozen_at = std::chrono::steady_clock::now();
        } else {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    }
    job.join();
    const double after_freeze_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen_at).count();
    if (read_pid(pid_file) > 0) kill(read_pid(pid_file), SIGCONT);  // in case the abort left it
    REQUIRE(frozen);
    INFO(ended.output);
    CHECK(ended.exit_code != 0);
    CHECK(ended.exit_code != 124);
    CHECK(after_freeze_s < 30);
    CHECK(std::regex_search(ended.output, std::regex("ringtrain: rank 0: warning: [^\\n]+ has not completed after "
                                                     "[0-9.]+ s(; waiting for rank " + std::to_string(rank) +
                                                     ")?; a rank may be stuck or dead")));
    CHECK(ended.output.find("aborting the job (sync.stall_abort_s = " + abort_limit + ")") != std::string::npos);
}

// A run stopped at `stop_step` and resumed logs the uninterrupted run's step lines plus the stop's own: the stop's line
// does not restart the log window, so every later line covers the same steps with the same loss, bit for bit.
inline void check_step_lines_match_after_stop(const std::string& whole_metrics, const std::string& parts_metrics,
                                              int64_t stop_step) {
    std::vector<nlohmann::json> whole_lines, parts_lines;
    for (const nlohmann::json& l : read_jsonl(whole_metrics))
        if (l["type"] == "step") whole_lines.push_back(l);
    for (const nlohmann::json& l : read_jsonl(parts_metrics))
        if (l["type"] == "step" && l["global_step"] != stop_step) parts_lines.push_back(l);
    CHECK(parts_lines.size() == whole_lines.size());
    for (size_t i = 0; i < whole_lines.size() && i < parts_lines.size(); ++i) {
        INFO("line of step " << whole_lines[i]["global_step"]);
        CHECK(parts_lines[i]["global_step"] == whole_lines[i]["global_step"]);
        CHECK(parts_lines[i]["loss"] == whole_lines[i]["loss"]);
    }
}

}  // namespace rt_test

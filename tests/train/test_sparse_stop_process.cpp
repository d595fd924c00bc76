// The sparse path's graceful stop through the binary under mpirun -np 2: SIGUSR1 sent to one rank's process mid-run
// ends the job with exit 3, the one stop line, "stopped" in summary.json and a checkpoint (checkpoints are off in the
// config); checkpoint.resume=auto then finishes with the parameters of an uninterrupted run (parameter_hash_per_rank).
// And train.stop_grace_s: with rank 0 frozen (SIGSTOP) the signalled rank cannot agree and ends the job (exit 4);
// with rank 1 frozen and no stop asked, sync.stall_warning_s / stall_abort_s report it and end the job.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "ringtrain/train/checkpoint.hpp"
#include "sparse_files.hpp"
#include "support/run_command.hpp"
#include "support/stop_process.hpp"

using namespace rt_test;
namespace fs = std::filesystem;

namespace {

// 4000 rows, batch 4 per rank at 2 ranks: 500 steps an epoch, 10 epochs; a few seconds, time enough to signal it
// mid-run.
constexpr int64_t kTotalSteps = 10 * 4000 / 8;

std::string config(const std::string& dir, const std::string& out) {
    write_svm(dir + "/train.svm", svm_rows(4000, 50, 3));
    write_svm(dir + "/test.svm", svm_rows(40, 50, 4));
    const std::string path = dir + "/" + out + ".json";
    write_file(path, R"({"model": ")" + source_dir() + R"(/models/sparse_logreg.json",
  "data": {"format": "libsvm", "train_file": ")" + dir + R"(/train.svm", "test_file": ")" + dir + R"(/test.svm",
           "shuffle_buffer": 64},
  "optimizer": {"name": "adagrad", "lr": 0.1},
  "train": {"seed": 5, "batch_size": 4, "epochs": 10, "log_every_steps": 100},
  "checkpoint": {"every_epochs": 0},
  "output": {"dir": ")" + dir + "/" + out + R"(", "progress": "none"}})");
    return path;
}

}  // namespace

TEST_CASE("sparse, mpirun -np 2: SIGUSR1 to one rank stops the job with exit 3 and a checkpoint; resume=auto ends "
          "with an uninterrupted run's parameters",
          "[train][sparse][mpi][stop]") {
    const std::string whole_dir = temp_dir("sparse-stop-process-whole");
    const auto whole = run_command(mpirun(2) + binary() + " train --config " + config(whole_dir, "whole"));
    INFO(whole.output);
    REQUIRE(whole.exit_code == 0);
    const auto reference = read_json(whole_dir + "/whole/summary.json")["parameter_hash_per_rank"];

    const std::string dir = temp_dir("sparse-stop-process");
    check_stop_one_rank_then_resume(dir, config(dir, "parts"), "parts", kTotalSteps, reference);
}

TEST_CASE("sparse, mpirun -np 2: a rank that cannot agree (rank 0 stopped with SIGSTOP) ends after "
          "train.stop_grace_s with exit 4 instead of holding the job",
          "[train][sparse][mpi][stop]") {
    const std::string dir = temp_dir("sparse-stop-grace");
    const std::string cfg = config(dir, "stuck");
    // `timeout` ends a job the watchdog failed to end (exit 124): the test fails instead of hanging.
    const std::string launch = "timeout 60 " + mpirun_train_with_pid_files(dir, cfg, " --set train.stop_grace_s=1");
    CommandResult ended;
    std::thread job([&] { ended = run_command(launch); });
    bool stopped_rank0 = false;
    for (int i = 0; i < 12000 && !stopped_rank0; ++i) {
        if (lines_in(dir + "/stuck/metrics.jsonl") >= 2 && read_pid(dir + "/pid.0") > 0 && read_pid(dir + "/pid.1") > 0)
            stopped_rank0 = kill(read_pid(dir + "/pid.0"), SIGSTOP) == 0 && wait_until_stopped(read_pid(dir + "/pid.0"));
        else
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const bool sent = stopped_rank0 && kill(read_pid(dir + "/pid.1"), SIGUSR1) == 0;
    job.join();
    REQUIRE(sent);
    INFO(ended.output);
    CHECK(ended.exit_code == 4);
    CHECK(ended.output.find("ringtrain: rank 1: SIGUSR1 came 1 s ago and the ranks did not agree to stop within "
                            "train.stop_grace_s") != std::string::npos);
    CHECK_FALSE(fs::exists(dir + "/stuck/summary.json"));
}

TEST_CASE("sparse, mpirun -np 2: a frozen rank (SIGSTOP) is reported after sync.stall_warning_s, naming it, and the "
          "job ends after sync.stall_abort_s",
          "[train][sparse][mpi][stop]") {
    const std::string dir = temp_dir("sparse-stall");
    const std::string cfg = config(dir, "stall");
    // `timeout` ends a job the stall watchdog failed to end (exit 124): the test fails instead of hanging.
    // Epochs enough for minutes (the 10 of the config take well under a second): the stop lands mid-training.
    const std::string launch =
        "timeout 60 " + mpirun_train_with_pid_files(dir, cfg, " --set train.epochs=100000 --set sync.stall_warning_s=1 "
                                                              "--set sync.stall_abort_s=3");
    check_frozen_rank_ends_job(launch, dir, dir + "/stall/metrics.jsonl", 2, 1, "3");
    CHECK_FALSE(fs::exists(dir + "/stall/summary.json"));
}

TEST_CASE("sparse, mpirun -np 2: a job suspended whole (SIGSTOP to every rank, as Slurm's suspend) for longer than "
          "sync.stall_abort_s is not a stall: it goes on when continued",
          "[train][sparse][mpi][stop]") {
    const std::string dir = temp_dir("sparse-suspend");
    const std::string cfg = config(dir, "suspend");
    const std::string launch =
        "timeout 60 " + mpirun_train_with_pid_files(dir, cfg, " --set train.epochs=100000 --set sync.stall_warning_s=0.5 "
                                                              "--set sync.stall_abort_s=1");
    CommandResult ended;
    std::thread job([&] { ended = run_command(launch); });
    bool suspended = false, stop_sent = false;
    for (int i = 0; i < 12000 && !suspended; ++i) {
        if (lines_in(dir + "/suspend/metrics.jsonl") >= 2 && read_pid(dir + "/pid.0") > 0 && read_pid(dir + "/pid.1") > 0) {
            const pid_t r0 = read_pid(dir + "/pid.0"), r1 = read_pid(dir + "/pid.1");
            suspended = kill(r0, SIGSTOP) == 0 && kill(r1, SIGSTOP) == 0 && wait_until_stopped(r0) && wait_until_stopped(r1);
            std::this_thread::sleep_for(std::chrono::seconds(3));  // three times the abort limit
            kill(r0, SIGCONT);
            kill(r1, SIGCONT);
            std::this_thread::sleep_for(std::chrono::milliseconds(500));  // trains on after the resume
            stop_sent = kill(r1, SIGUSR1) == 0;  // then the graceful stop ends it (exit 3)
        } else {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    }
    job.join();
    REQUIRE(suspended);
    REQUIRE(stop_sent);
    INFO(ended.output);
    CHECK(ended.exit_code == 3);
    CHECK(ended.output.find("has not completed after") == std::string::npos);
    CHECK(fs::exists(dir + "/suspend/summary.json"));
}

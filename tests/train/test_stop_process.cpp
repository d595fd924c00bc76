// The graceful stop through the binary under mpirun -np 2: SIGUSR1 sent to one rank's process mid-run, and to mpirun
// (which forwards SIGUSR1 to every rank). Each ends with exit 3, the one stop line, "stopped" in summary.json and a
// checkpoint (checkpoints are off in the config); checkpoint.resume=auto then finishes with the parameters of an
// uninterrupted run (parameter_hash_per_rank). And a rank frozen outside the gradient allreduce (the evaluation) is
// reported and the job ended by the stall watchdog.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "fixtures.hpp"
#include "support/stop_process.hpp"
#include "ringtrain/train/checkpoint.hpp"

using namespace rt_test;
namespace fs = std::filesystem;

namespace {

// 28x28 inputs, 60 epochs of 30 steps at 2 ranks: about 2 s of training, time enough to signal it mid-run.
std::string config(const std::string& dir, const std::string& out) {
    std::string model = kTinyCnn;
    model.replace(model.find("[1, 8, 8]"), 9, "[1, 28, 28]");
    write_file(dir + "/tiny28.json", model);
    const std::string path = dir + "/" + out + ".json";
    write_file(path, R"({"model": ")" + dir + R"(/tiny28.json",
  "data": {"format": "synthetic", "synthetic_shape": [1, 28, 28], "synthetic_classes": 4,
           "synthetic_train_size": 480, "synthetic_test_size": 96},
  "train": {"batch_size": 8, "epochs": 60, "seed": 7, "log_every_steps": 10},
  "checkpoint": {"every_epochs": 0},
  "output": {"dir": ")" + dir + "/" + out + R"(", "progress": "none"}})");
    return path;
}

}  // namespace

TEST_CASE("mpirun -np 2: SIGUSR1 to one rank or to mpirun stops the job with exit 3 and a checkpoint; resume=auto "
          "ends with an uninterrupted run's parameters",
          "[train][mpi][stop]") {
    const std::string dir = temp_dir("stop-process");
    const int64_t total = 60 * 480 / 16;
    // The uninterrupted run, once for both sections (Catch2 runs the test case once per section).
    static const nlohmann::json reference = [] {
        const std::string whole_dir = temp_dir("stop-process-whole");
        const auto whole = run_command(mpirun(2) + binary() + " train --config " + config(whole_dir, "whole"));
        INFO(whole.output);
        REQUIRE(whole.exit_code == 0);
        return read_json(whole_dir + "/whole/summary.json")["parameter_hash_per_rank"];
    }();

    SECTION("to one rank's process") {
        check_stop_one_rank_then_resume(dir, config(dir, "parts"), "parts", total, reference);
    }
    SECTION("to mpirun, which forwards SIGUSR1 to every rank") {
        const std::string cfg = config(dir, "all");
        const std::string launch =
            "echo $$ > " + dir + "/mpirun.pid; exec " + mpirun(2) + binary() + " train --config " + cfg;
        CommandResult stopped;
        std::thread job([&] { stopped = run_command(launch); });
        const bool sent = signal_mid_run(dir + "/all/metrics.jsonl", dir + "/mpirun.pid");
        job.join();
        REQUIRE(sent);
        INFO(stopped.output);
        CHECK(stopped.exit_code == 3);
        const auto summary = read_json(dir + "/all/summary.json");
        const int64_t step = stopped_step(summary);
        CHECK(step > 0);
        CHECK(fs::exists(dir + "/all/checkpoints/" + ringtrain::train::checkpoint_file_name(step)));
    }
}

TEST_CASE("mpirun -np 2: a rank frozen (SIGSTOP) outside the gradient allreduce, here mostly in the evaluation, is "
          "reported after sync.stall_warning_s and the job ends after sync.stall_abort_s",
          "[train][mpi][stop]") {
    const std::string dir = temp_dir("stall-eval");
    // Logistic regression on 64 training and 200,000 test samples: nearly all of the run is evaluation, whose
    // allreduce is where rank 0 waits for a frozen rank 1; thousands of epochs, so the freeze lands mid-run.
    const std::string cfg = dir + "/eval.json";
    write_file(cfg, R"({"model": ")" + source_dir() + R"(/models/logreg.json",
  "data": {"format": "synthetic", "synthetic_shape": [1, 28, 28], "synthetic_classes": 10,
           "synthetic_train_size": 64, "synthetic_test_size": 200000},
  "train": {"batch_size": 8, "epochs": 5000, "seed": 7, "log_every_steps": 2},
  "sync": {"stall_warning_s": 1, "stall_abort_s": 3},
  "checkpoint": {"every_epochs": 0},
  "output": {"dir": ")" + dir + R"(/eval", "progress": "none"}})");
    // `timeout` ends a job the watchdog failed to end (exit 124): the test fails instead of hanging.
    const std::string launch = "timeout 60 " + mpirun_train_with_pid_files(dir, cfg);
    check_frozen_rank_ends_job(launch, dir, dir + "/eval/metrics.jsonl", 4, 1, "3");
}

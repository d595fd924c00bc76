// The sparse path's graceful stop through the binary under mpirun -np 2: SIGUSR1 sent to one rank's process mid-run
// ends the job with exit 3, the one stop line, "stopped" in summary.json and a checkpoint (checkpoints are off in the
// config); checkpoint.resume=auto then finishes with the parameters of an uninterrupted run (parameter_hash_per_rank).
// And train.stop_grace_s: with rank 0 frozen (SIGSTOP) the signalled rank cannot agree and ends the job (exit 4).
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
    const std::string launch = "timeout 60 " + mpirun(2) + "sh -c 'echo $$ > " + dir +
                               "/pid.$OMPI_COMM_WORLD_RANK; exec " + binary() + " train --config " + cfg +
                               " --set train.stop_grace_s=1'";
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

// The graceful stop on the sparse path, driven in-process on every rank (mpirun -np 1 and -np 2): a signal raised on
// the last rank only after step 7 stops every rank at that step boundary (the vote rides in the allreduce of the
// previous step's loss that starts each step), with a checkpoint although checkpoints are off, "stopped" in the
// summary and metrics.jsonl ending at that step; checkpoint.resume=auto then ends bit for bit where an uninterrupted
// run does. Also for local SGD (the step allreduce carries the vote too; the stop waits for an averaging step), and
// at an epoch's last step (the epoch completes first).
#include <catch2/catch.hpp>
#include <mpi.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "support/stop_process.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/train/config.hpp"
#include "ringtrain/train/sparse_trainer.hpp"
#include "sparse_files.hpp"
#include "support/mpi_job.hpp"
#include "support/run_command.hpp"

using namespace rt_test;
using nlohmann::json;
using ringtrain::train::Config;
using ringtrain::train::SparseTrainer;
namespace fs = std::filesystem;

namespace {

// One folder for the whole job, with a 160-row training file and a 40-row test file.
std::string job_dir(const std::string& name) {
    return shared_job_dir("sparse-stop-" + name, [](const std::string& dir) {
        write_svm(dir + "/train.svm", svm_rows(160, 50, 3));
        write_svm(dir + "/test.svm", svm_rows(40, 50, 4));
    });
}

// Batch 8 per rank, 3 epochs: 160 / (8 x world) steps an epoch.
Config sparse(const std::string& dir, const std::string& extra, const std::vector<std::string>& overrides = {}) {
    const std::string text = R"({"model": ")" + source_dir() + R"(/models/sparse_logreg.json",
  "data": {"format": "libsvm", "train_file": ")" + dir + R"(/train.svm", "test_file": ")" + dir + R"(/test.svm",
           "shuffle_buffer": 16},
  "optimizer": {"name": "adagrad", "lr": 0.2},
  "train": {"seed": 5, "batch_size": 8, "epochs": 3, "log_every_steps": 5},
  "checkpoint": {"every_epochs": 0},
  "output": {"dir": ")" + dir + R"(/out", "progress": "none"})" + extra + "}";
    return Config::from_json(json::parse(text), "test", overrides);
}

}  // namespace

TEST_CASE("sparse: a signal on one rank stops every rank at the next step boundary; resume=auto ends bit for bit",
          "[train][sparse][mpi][stop]") {
    const int world = world_size(), rank = world_rank();
    const int64_t total = 3 * 160 / (8 * world);
    auto comm = ringtrain::comm::make_communicator("ring");
    struct Variant {
        const char* name;
        const char* extra;
        bool local_sgd;
    };
    const Variant variants[] = {
        {"allgather", "", false},
        {"local-sgd", R"(, "sync": {"mode": "local_sgd", "local_sgd_period": 3})", true},
    };
    for (const auto& [name, extra, local_sgd] : variants) {
        INFO("variant " << name);
        const std::string whole_dir = job_dir(std::string(name) + "-whole");
        const std::string parts_dir = job_dir(std::string(name) + "-parts");
        std::vector<float> whole;
        {
            SparseTrainer t(sparse(whole_dir, extra), *comm);
            const json s = t.train();
            CHECK(s["stopped"].is_null());
            CHECK(s["steps"] == total);
            whole = t.parameters_flat();
        }
        // The last rank alone gets SIGUSR1 after step 7; the ranks agree before step 8 (with step 7's loss); local
        // SGD with 2 ranks at its next averaging step, 9.
        const int64_t stop_step = world > 1 && local_sgd ? 9 : 7;
        {
            SparseTrainer t(sparse(parts_dir, extra), *comm);
            t.set_step_callback([&](int64_t step) {
                if (step == 7 && rank == world - 1) std::raise(SIGUSR1);
            });
            const json s = t.train();
            CHECK(s["stopped"] == "signal SIGUSR1 at step " + std::to_string(stop_step));
            CHECK(s["steps"] == stop_step);
            CHECK(s["epochs_completed"] == 0);
            CHECK(s["parameters_identical"] == true);
            if (rank == 0) {
                CHECK(fs::exists(parts_dir + "/out/checkpoints/" + ringtrain::train::checkpoint_file_name(stop_step)));
                CHECK(read_json(parts_dir + "/out/summary.json") == s);
                // metrics.jsonl ends with the stopped step (logged every 5: steps 7 and 9 only because of the stop).
                const auto lines = read_jsonl(parts_dir + "/out/metrics.jsonl");
                REQUIRE(!lines.empty());
                CHECK(lines.back()["type"] == "step");
                CHECK(lines.back()["global_step"] == stop_step);
                CHECK(lines.back()["loss"].is_number());
            }
        }
        // The handlers are restored after train(): the next run starts without a pending stop.
        SparseTrainer t(sparse(parts_dir, extra, {"checkpoint.resume=auto"}), *comm);
        const json s = t.train();
        CHECK(s["stopped"].is_null());
        CHECK(s["resumed"] == true);
        CHECK(s["steps"] == total);
        CHECK(s["steps_this_run"] == total - stop_step);
        CHECK(t.parameters_flat() == whole);
        if (rank == 0)
            check_step_lines_match_after_stop(whole_dir + "/out/metrics.jsonl", parts_dir + "/out/metrics.jsonl",
                                              stop_step);
        comm->barrier();
    }
}

TEST_CASE("sparse: SIGTERM at an epoch's last step stops after that epoch, also with train.stop_signal none",
          "[train][sparse][mpi][stop]") {
    const int world = world_size(), rank = world_rank();
    auto comm = ringtrain::comm::make_communicator("ring");
    const std::string dir = job_dir("sigterm");
    const int64_t per_epoch = 160 / (8 * world);
    SparseTrainer t(sparse(dir, "", {"train.stop_signal=none", "train.stop_grace_s=30"}), *comm);
    // Raised after the epoch's last step: the next allreduce finds the epoch over and the stop together, so the
    // epoch completes (evaluation, epoch line) and the checkpoint is at its end.
    t.set_step_callback([&](int64_t step) {
        if (step == per_epoch && rank == world - 1) std::raise(SIGTERM);
    });
    const json s = t.train();
    CHECK(s["stopped"] == "signal SIGTERM at step " + std::to_string(per_epoch));
    CHECK(s["epochs_completed"] == 1);
    CHECK(s["steps_per_epoch"] == per_epoch);
    CHECK(s["test_auc"].is_number());
    if (rank == 0) {
        CHECK(fs::exists(dir + "/out/checkpoints/" + ringtrain::train::checkpoint_file_name(per_epoch)));
        bool epoch_line = false;
        for (const json& line : read_jsonl(dir + "/out/metrics.jsonl")) epoch_line |= line["type"] == "epoch";
        CHECK(epoch_line);
    }
    comm->barrier();
}

TEST_CASE("sparse: a stop agreed where the last epoch's data runs out finishes the run as usual",
          "[train][sparse][mpi][stop]") {
    // The run ends there anyway (its last epoch's evaluation, checkpoint, summary): it used to exit 3 with "stopped".
    const int world = world_size(), rank = world_rank();
    auto comm = ringtrain::comm::make_communicator("ring");
    const int64_t per_epoch = 160 / (8 * world);
    json whole;
    {
        SparseTrainer t(sparse(job_dir("last-epoch-whole"), "", {"train.epochs=1"}), *comm);
        whole = t.train();
    }
    SparseTrainer t(sparse(job_dir("last-epoch-stop"), "", {"train.epochs=1"}), *comm);
    t.set_step_callback([&](int64_t step) {
        if (step == per_epoch && rank == world - 1) std::raise(SIGUSR1);  // the next vote finds the data out
    });
    const json s = t.train();
    CHECK(s["stopped"].is_null());
    CHECK(s["epochs_completed"] == 1);
    if (rank == 0) {
        CHECK(s["test_auc"] == whole["test_auc"]);
        CHECK(s["test_logloss"] == whole["test_logloss"]);
    }
    comm->barrier();
}

// Not a stop, but the same in-process driving: a training file that changes under a run ends it at the next epoch's
// start, on every rank, naming the file, instead of training on other or fewer rows without a word.
TEST_CASE("sparse: a training file changed during the run ends it at the next epoch, exit-2 style",
          "[train][sparse][mpi]") {
    const int world = world_size(), rank = world_rank();
    auto comm = ringtrain::comm::make_communicator("ring");
    const std::string dir = job_dir("changed");
    const int64_t per_epoch = 160 / (8 * world);
    SparseTrainer t(sparse(dir, ""), *comm);
    t.set_step_callback([&](int64_t step) {
        if (step == per_epoch - 1 && rank == 0) std::ofstream(dir + "/train.svm", std::ios::app) << "1 3:1\n";
    });
    CHECK_THROWS_WITH(t.train(), Catch::Contains(dir + "/train.svm: data.train_file changed during the run") &&
                                     Catch::Contains("restore it, or start a fresh run on the new file"));
    comm->barrier();
}

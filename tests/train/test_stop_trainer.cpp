// The graceful stop driven in-process on every rank (mpirun -np 1 and -np 2): a signal raised on the last rank only
// at step 7 stops every rank at the same step boundary, with a checkpoint and "stopped" in the summary, and
// checkpoint.resume=auto then ends bit for bit where an uninterrupted run does. One variant per way the ranks agree:
// the vote in the blocking path's single bucket, in the overlapped path's last bucket (16-bit wire too), and local
// SGD's averaging steps.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <csignal>
#include <filesystem>

#include "fixtures.hpp"
#include "tiny_run.hpp"
#include "support/mpi_job.hpp"
#include "support/stop_process.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/train/config.hpp"
#include "ringtrain/train/trainer.hpp"

using namespace rt_test;
using nlohmann::json;
using ringtrain::train::Config;
using ringtrain::train::Trainer;
namespace fs = std::filesystem;

namespace {

// One folder for the whole job, with the tiny model inside.
std::string job_dir(const std::string& name) {
    return shared_job_dir("stop-" + name, [](const std::string& dir) {
        write_file(dir + "/tiny.json", kTinyCnn);
    });
}


// The tiny run with `sets` in a folder of its own, never stopped: its summary.
json uninterrupted(ringtrain::comm::Communicator& comm, const std::string& name, const std::vector<std::string>& sets) {
    Trainer t(tiny_run(job_dir(name), "", sets), comm);
    return t.train();
}

// The tiny run with `sets` in `dir`, SIGUSR1 raised on the last rank after step `step` (agreed with the next step's
// vote): its summary.
json signalled_after(ringtrain::comm::Communicator& comm, const std::string& dir, const std::vector<std::string>& sets,
                     int64_t step) {
    Trainer t(tiny_run(dir, "", sets), comm);
    t.set_step_callback([&](int64_t at) {
        if (at == step && world_rank() == world_size() - 1) std::raise(SIGUSR1);
    });
    return t.train();
}

// The run in `dir` continued with checkpoint.resume=auto: its summary.
json resumed(ringtrain::comm::Communicator& comm, const std::string& dir, std::vector<std::string> sets) {
    sets.push_back("checkpoint.resume=auto");
    Trainer t(tiny_run(dir, "", sets), comm);
    return t.train();
}

struct Variant {
    const char* name;
    const char* extra;
    bool local_sgd;
};

}  // namespace

TEST_CASE("a signal on one rank stops every rank at the next step boundary; resume=auto ends bit for bit",
          "[train][mpi][stop]") {
    const int world = world_size(), rank = world_rank();
    auto comm = ringtrain::comm::make_communicator("ring");
    // Checkpoints off: the stop writes one anyway.
    const Variant variants[] = {
        {"one-bucket", R"(, "checkpoint": {"every_epochs": 0})", false},
        {"overlapped-fp16",
         R"(, "checkpoint": {"every_epochs": 0}, "sync": {"fusion_bytes": 256, "cycle_time_ms": 0, "compression": "fp16"})",
         false},
        {"local-sgd", R"(, "sync": {"mode": "local_sgd", "local_sgd_period": 3})", true},
    };
    for (const Variant& v : variants) {
        INFO("variant " << v.name);
        const std::string whole_dir = job_dir(std::string(v.name) + "-whole");
        const std::string parts_dir = job_dir(std::string(v.name) + "-parts");
        std::vector<float> whole;
        {
            Trainer t(tiny_run(whole_dir, v.extra, {"train.log_every_steps=5"}), *comm);
            const json s = t.train();
            CHECK(s["stopped"].is_null());
            whole = t.parameters_flat();
        }
        // The last rank alone gets SIGUSR1 after step 7; the ranks agree at the end of step 8 (one rank: its own
        // flag; local SGD with 2 ranks: at the next averaging, step 9).
        const int64_t stop_step = world > 1 && v.local_sgd ? 9 : 8;
        {
            Trainer t(tiny_run(parts_dir, v.extra, {"train.log_every_steps=5"}), *comm);
            t.set_step_callback([&](int64_t step) {
                if (step == 7 && rank == world - 1) std::raise(SIGUSR1);
            });
            const json s = t.train();
            CHECK(s["stopped"] == "signal SIGUSR1 at step " + std::to_string(stop_step));
            CHECK(s["steps"] == stop_step);
            CHECK(s["parameters_identical"] == true);
            if (rank == 0) {
                CHECK(fs::exists(parts_dir + "/out/checkpoints/" + ringtrain::train::checkpoint_file_name(stop_step)));
                CHECK(read_json(parts_dir + "/out/summary.json") == s);
                // metrics.jsonl ends with the stopped step.
                const auto lines = read_jsonl(parts_dir + "/out/metrics.jsonl");
                REQUIRE(!lines.empty());
                CHECK(lines.back()["type"] == "step");
                CHECK(lines.back()["global_step"] == stop_step);
            }
        }
        // The handlers are restored after the run: the next run starts without a pending stop.
        Trainer t(tiny_run(parts_dir, v.extra, {"checkpoint.resume=auto", "train.log_every_steps=5"}), *comm);
        const json s = t.train();
        CHECK(s["stopped"].is_null());
        CHECK(s["steps"] == 2 * 480 / (8 * world));
        CHECK(s["steps_this_run"] == 2 * 480 / (8 * world) - stop_step);
        CHECK(t.parameters_flat() == whole);
        if (rank == 0)
            check_step_lines_match_after_stop(whole_dir + "/out/metrics.jsonl", parts_dir + "/out/metrics.jsonl",
                                              stop_step);
        comm->barrier();
    }
}

TEST_CASE("SIGTERM stops the run too, also with train.stop_signal none", "[train][mpi][stop]") {
    const int world = world_size(), rank = world_rank();
    auto comm = ringtrain::comm::make_communicator("ring");
    const std::string dir = job_dir("sigterm");
    Trainer t(tiny_run(dir, "", {"train.stop_signal=none", "train.stop_grace_s=30", "train.log_every_steps=5"}), *comm);
    // On the last rank, at the last step of the first epoch: the epoch completes (evaluation, epoch line) before the
    // stop, and the checkpoint is the epoch's.
    const int64_t per_epoch = 480 / (8 * world);
    t.set_step_callback([&](int64_t step) {
        if (step == per_epoch - 1 && rank == world - 1) std::raise(SIGTERM);
    });
    const json s = t.train();
    CHECK(s["stopped"] == "signal SIGTERM at step " + std::to_string(per_epoch));
    CHECK(s["epochs_completed"] == 1);
    CHECK(!s["test_accuracy"].is_null());
    if (rank == 0) CHECK(fs::exists(dir + "/out/checkpoints/" + ringtrain::train::checkpoint_file_name(per_epoch)));
    comm->barrier();
}

TEST_CASE("a stop agreed at the run's last step skips the evaluation; the resumed job evaluates the final model",
          "[train][mpi][stop]") {
    // Such a job ends at train.max_steps with no test figures; its requeued job finds nothing left to train and
    // used to keep that summary (test_accuracy null, "stopped") for good.
    const int rank = world_rank();
    auto comm = ringtrain::comm::make_communicator("ring");
    const std::vector<std::string> sets{"train.max_steps=8", "train.log_every_steps=5"};
    const json whole = uninterrupted(*comm, "last-step-whole", sets);
    REQUIRE(whole["test_accuracy"].is_number());
    const std::string dir = job_dir("last-step-stop");
    {
        const json s = signalled_after(*comm, dir, sets, 7);
        REQUIRE(s["stopped"] == "signal SIGUSR1 at step 8");
        CHECK(s["test_accuracy"].is_null());  // no evaluation in the grace time
    }
    const json s = resumed(*comm, dir, sets);
    CHECK(s["stopped"].is_null());
    if (rank == 0) {
        CHECK(s["test_accuracy"] == whole["test_accuracy"]);  // the same model, evaluated
        CHECK(s["test_loss"] == whole["test_loss"]);
        CHECK(s["steps"] == 8);
        const json on_disk = read_json(dir + "/out/summary.json");
        CHECK(on_disk["test_accuracy"] == whole["test_accuracy"]);
        CHECK(on_disk["stopped"].is_null());
    }
    comm->barrier();
}

TEST_CASE("a stop agreed at the last epoch's last step finishes the run as usual", "[train][mpi][stop]") {
    // The epoch's end evaluates anyway, so nothing is left to stop early. It used to end with "stopped" (exit 3) and
    // the test figures, and its requeued job kept that "stopped" for good.
    const int world = world_size(), rank = world_rank();
    auto comm = ringtrain::comm::make_communicator("ring");
    const std::vector<std::string> sets{"train.epochs=1"};
    const int64_t last = 480 / (8 * world);  // tiny_config: 480 samples, batch 8 per rank
    const json whole = uninterrupted(*comm, "last-epoch-whole", sets);
    const json s = signalled_after(*comm, job_dir("last-epoch-stop"), sets, last - 1);  // agreed at the last step
    CHECK(s["stopped"].is_null());
    if (rank == 0) {
        CHECK(s["steps"] == last);
        CHECK(s["test_accuracy"] == whole["test_accuracy"]);
        CHECK(s["test_loss"] == whole["test_loss"]);
    }
    comm->barrier();
}

TEST_CASE("a stop at max_steps inside an epoch after an epoch's evaluation: the resumed job evaluates the final model",
          "[train][mpi][stop]") {
    // The stopped run's summary holds the first epoch's figures, an earlier model's; its requeued job found nothing
    // left to train and kept them as the run's.
    const int world = world_size(), rank = world_rank();
    auto comm = ringtrain::comm::make_communicator("ring");
    const int64_t last = 480 / (8 * world) + 7;  // 7 steps into the second epoch
    const std::vector<std::string> sets{"train.max_steps=" + std::to_string(last)};
    const json whole = uninterrupted(*comm, "after-eval-whole", sets);
    const std::string dir = job_dir("after-eval-stop");
    {
        const json s = signalled_after(*comm, dir, sets, last - 1);
        REQUIRE(s["stopped"] == "signal SIGUSR1 at step " + std::to_string(last));
        CHECK(s["test_accuracy"].is_number());  // the first epoch's
    }
    const json s = resumed(*comm, dir, sets);
    CHECK(s["stopped"].is_null());
    if (rank == 0) {
        CHECK(s["test_loss"] == whole["test_loss"]);  // the final model's, evaluated by the requeued job
        const json on_disk = read_json(dir + "/out/summary.json");
        CHECK(on_disk["test_loss"] == whole["test_loss"]);
        CHECK(on_disk["stopped"].is_null());
    }
    comm->barrier();
}

// Trainer driven in-process on every rank (run under mpirun with 1 and 2 ranks): the steps it runs, identical
// parameters everywhere, the summary it returns against the one it wrote, and resume from a mid-run checkpoint
// against an uninterrupted run, bit for bit.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "fixtures.hpp"
#include "tiny_run.hpp"
#include "support/mpi_job.hpp"
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
    return shared_job_dir("trainer-" + name, [](const std::string& dir) {
        write_file(dir + "/tiny.json", kTinyCnn);
    });
}


std::vector<uint64_t> hashes_over_ranks(ringtrain::comm::Communicator& comm, const Trainer& t) {
    return comm.allgather(t.parameter_hash());
}

}  // namespace

TEST_CASE("a Trainer runs every step and ends with one model on every rank", "[train][mpi]") {
    const int world = world_size();
    const int64_t steps = 2 * 480 / (8 * world);
    auto comm = ringtrain::comm::make_communicator("ring");
    for (const std::string sync : {R"("allreduce")", R"("local_sgd", "local_sgd_period": 3)"}) {
        INFO("sync.mode " << sync);
        // A folder per run: a fresh run into a previous run's output.dir is refused.
        const std::string dir = job_dir(sync.size() < 12 ? "steps-allreduce" : "steps-local-sgd");
        const Config cfg = tiny_run(dir, R"(, "sync": {"mode": )" + sync + "}");
        Trainer trainer(cfg, *comm);
        const json summary = trainer.train();
        CHECK(summary["steps"] == steps);
        CHECK(summary["steps_this_run"] == steps);
        CHECK(summary["steps_per_epoch"] == steps / 2);
        CHECK(summary["epochs_completed"] == 2);
        CHECK(summary["resumed_from"].is_null());
        CHECK(summary["world_size"] == world);
        const auto hashes = hashes_over_ranks(*comm, trainer);
        for (uint64_t h : hashes) CHECK(h == hashes[0]);
        CHECK(summary["parameter_hash_per_rank"] == json(hashes));
        CHECK(summary["parameters_identical"] == true);
        if (comm->rank() == 0) {
            // What train() returns is what it wrote, and metrics.jsonl has a line per step and per epoch.
            CHECK(read_json(dir + "/out/summary.json") == summary);
            int64_t step_lines = 0, epoch_lines = 0;
            for (const auto& r : read_jsonl(dir + "/out/metrics.jsonl")) {
                step_lines += r["type"] == "step";
                epoch_lines += r["type"] == "epoch";
            }
            CHECK(step_lines == steps);
            CHECK(epoch_lines == 2);
        }
        comm->barrier();
    }
}

TEST_CASE("a Trainer resumed from a mid-run checkpoint ends bit for bit where an uninterrupted one does",
          "[train][mpi][checkpoint]") {
    const int world = world_size();
    const int64_t steps = 2 * 480 / (8 * world);
    auto comm = ringtrain::comm::make_communicator("ring");
    // Momentum, Adam's moments and step count, and every rank's dropout RNG all have to survive the checkpoint.
    for (const std::string opt : {R"("name": "sgd", "lr": 0.05, "momentum": 0.9)", R"("name": "adam", "lr": 0.01)"}) {
        INFO("optimizer " << opt);
        const std::string extra = R"(, "optimizer": {)" + opt + "}";
        const std::string whole_dir = job_dir("whole"), parts_dir = job_dir("parts");
        std::vector<float> whole;
        {
            Trainer t(tiny_run(whole_dir, extra), *comm);
            t.train();
            whole = t.parameters_flat();
        }
        // Stop mid-epoch (step 37 of 60 on one rank, 7 into the second epoch of 30 on two), then resume.
        {
            Trainer t(tiny_run(parts_dir, extra, {"train.max_steps=37"}), *comm);
            const json s = t.train();
            CHECK(s["steps"] == 37);
            CHECK(s["stopped_by_max_steps"] == true);
        }
        const Config resumed_cfg = tiny_run(parts_dir, extra, {"checkpoint.resume=auto"});
        Trainer t(resumed_cfg, *comm);
        const json s = t.train();
        CHECK(s["steps"] == steps);
        CHECK(s["steps_this_run"] == steps - 37);
        CHECK(s["resumed_from"].is_string());
        const std::vector<float> resumed = t.parameters_flat();
        REQUIRE(resumed.size() == whole.size());
        CHECK(resumed == whole);  // bitwise: the same arithmetic in the same order
        // The final checkpoint holds those parameters: evaluating it gives the run's test accuracy.
        const std::string last = ringtrain::train::checkpoint_file_name(steps);
        CHECK(t.evaluate_checkpoint(parts_dir + "/out/checkpoints/" + last)["test_accuracy"] == s["test_accuracy"]);
        if (comm->rank() == 0) {
            std::string latest;
            std::ifstream(parts_dir + "/out/checkpoints/latest") >> latest;
            CHECK(latest == last);
        }
        comm->barrier();
    }
}

TEST_CASE("every rank follows rank 0's resume decision, a fresh start included", "[train][mpi][checkpoint]") {
    const std::string dir = job_dir("decision");
    const int64_t steps = 2 * 480 / (8 * world_size());
    auto comm = ringtrain::comm::make_communicator("ring");
    {
        Trainer t(tiny_run(dir, "", {"train.max_steps=7"}), *comm);
        t.train();
    }
    // Ranks on separate file systems: only the other ranks' output.dir holds that checkpoint. Rank 0 finds none
    // and starts fresh, so every rank must, with rank 0's parameters; no rank may continue from step 7.
    const std::string out = comm->rank() == 0 ? dir + "/fresh" : dir + "/out";
    const Config cfg =
        Config::from_json(json::parse(tiny_config(dir + "/tiny.json", out)), "test", {"checkpoint.resume=auto"});
    Trainer t(cfg, *comm);
    const json s = t.train();
    CHECK(s["steps_this_run"] == steps);
    CHECK(s["resumed_from"].is_null());
    const auto hashes = hashes_over_ranks(*comm, t);
    for (uint64_t h : hashes) CHECK(h == hashes[0]);
    comm->barrier();
}

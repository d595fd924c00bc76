// Data parallelism, end to end through mpirun: N ranks x batch B must equal 1 rank x batch N*B, every rank
// must end with the same parameters, and a rank that cannot go on must bring the job down with a message.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "fixtures.hpp"

using namespace rt_test;

namespace {

constexpr int kSteps = 10;
constexpr size_t kParamTensors = 6;  // conv w,b; fc1 w,b; fc2 w,b

std::vector<float> final_parameters(const std::string& out) {
    return checkpoint_parameters(out + "/checkpoints/ckpt-" + std::string(9 - std::to_string(kSteps).size(), '0') +
                                     std::to_string(kSteps) + ".bin",
                                 kParamTensors);
}

}  // namespace

TEST_CASE("N ranks x batch B reach the parameters of 1 rank x batch N*B", "[train][mpi]") {
    const std::string dir = temp_dir("equiv");
    write_file(dir + "/tiny.json", kTinyCnnNoDropout);
    const std::string common = R"(, "optimizer": {"name": "sgd", "lr": 0.1, "lr_scaling": "none"},
                                   "checkpoint": {"every_epochs": 0, "every_steps": )" + std::to_string(kSteps) + "}";
    for (const std::string backend : {"ring", "mpi"}) {
        for (int n : {2, 3, 4}) {
            SECTION(backend + " at " + std::to_string(n) + " ranks") {
                const std::string single = dir + "/single" + std::to_string(n) + backend;
                const std::string multi = dir + "/multi" + std::to_string(n) + backend;
                write_file(dir + "/s.json", tiny_config(dir + "/tiny.json", single, common));
                write_file(dir + "/m.json", tiny_config(dir + "/tiny.json", multi, common));
                const std::string steps = " --set train.max_steps=" + std::to_string(kSteps) + " --set sync.backend=" + backend;
                auto r = run_command(binary() + " train --config " + dir + "/s.json --set train.batch_size=" +
                                     std::to_string(8 * n) + steps);
                INFO(r.output);
                REQUIRE(r.exit_code == 0);
                r = run_command(mpirun(n) + binary() + " train --config " + dir + "/m.json --set train.batch_size=8" + steps);
                INFO(r.output);
                REQUIRE(r.exit_code == 0);

                const auto s = read_json(multi + "/summary.json");
                CHECK(s["world_size"] == n);
                CHECK(s["global_batch_size"] == 8 * n);
                CHECK(s["parameters_identical"] == true);
                CHECK(s["bytes_sent"].get<uint64_t>() > 0);
                // Every synchronised step's local work was measured on every rank.
                const auto& st = s["stragglers"];
                CHECK(st["steps"] == kSteps);
                REQUIRE(st["slowest_steps_per_rank"].size() == static_cast<size_t>(n));
                int64_t slowest_total = 0;
                for (const auto& c : st["slowest_steps_per_rank"]) slowest_total += c.get<int64_t>();
                CHECK(slowest_total == kSteps);
                CHECK(st["wait_for_slowest_s"].get<double>() >= 0);
                CHECK(st["wait_for_slowest_fraction"].get<double>() < 1);
                for (const auto& m : st["mean_work_ms_per_rank"]) CHECK(m.get<double>() > 0);

                const auto a = final_parameters(single);
                const auto b = final_parameters(multi);
                REQUIRE(a.size() == b.size());
                REQUIRE(!a.empty());
                double diff2 = 0, norm2 = 0, maxabs = 0, maxdiff = 0;
                for (size_t i = 0; i < a.size(); ++i) {
                    const double d = double(a[i]) - b[i];
                    diff2 += d * d;
                    norm2 += double(a[i]) * a[i];
                    maxabs = std::max(maxabs, std::fabs(double(a[i])));
                    maxdiff = std::max(maxdiff, std::fabs(d));
                }
                CHECK(std::sqrt(diff2 / norm2) < 1e-5);
                CHECK(maxdiff < 1e-5 * maxabs + 1e-7);
                // And the runs did move the parameters (the comparison is not vacuous).
                const auto s1 = read_json(single + "/summary.json");
                CHECK(s1["steps"] == kSteps);
            }
        }
    }
}

TEST_CASE("three ranks, each with its own dropout masks, end with identical parameters", "[train][mpi]") {
    const std::string dir = temp_dir("seeds");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out",
                                            R"(, "optimizer": {"name": "adam", "lr": 0.01}, "checkpoint": {"every_epochs": 0})"));
    const std::string args = " train --config " + dir + "/c.json --set train.max_steps=15";
    // Every rank draws its own dropout masks (the seed is mixed with the rank); ranks started with different seeds
    // are refused by the start-up agreement (test_disagreeing_ranks), as the seed also orders the shared shuffle.
    const std::string cmd = mpirun(3) + binary() + args;
    const auto r = run_command(cmd);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto s = read_json(dir + "/out/summary.json");
    REQUIRE(s["parameter_hash_per_rank"].size() == 3);
    CHECK(s["parameter_hash_per_rank"][0] == s["parameter_hash_per_rank"][1]);
    CHECK(s["parameter_hash_per_rank"][0] == s["parameter_hash_per_rank"][2]);
    CHECK(s["parameters_identical"] == true);
}

TEST_CASE("the straggler report names the rank that does more work per step", "[train][mpi]") {
    const std::string dir = temp_dir("straggler");
    write_file(dir + "/tiny.json", kTinyCnnNoDropout);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out", R"(, "checkpoint": {"every_epochs": 0})"));
    // MPMD: rank 1 runs the same config but is stopped most of the time (SIGSTOP/SIGCONT from a wrapper: ~20 ms
    // stopped, ~1-2 ms running), so its local work (several ms a step, longer than a run window) takes longer in
    // (nearly) every step. (With 50 ms stops and 3 ms windows, on a VM where a step's work fit in a window, rank 0
    // came out slowest in 17 of 20 steps, 2026-11-27.) (Ranks may not differ
    // in batch size: the start-up agreement refuses that.) 20 steps stay inside the first epoch (a shard of 80000
    // samples: 20 steps of 4000).
    const std::string args = " train --config " + dir + "/c.json --set data.synthetic_train_size=160000 --set train.max_steps=20" +
                             " --set train.batch_size=4000";
    const std::string throttled = "bash -c '" + binary() + args +
                                  " & p=$!; while kill -STOP $p 2>/dev/null; do sleep 0.02; kill -CONT $p; sleep 0.001; done;"
                                  " wait $p'";
    const std::string cmd = mpirun(1) + binary() + args + " : -np 1 " + throttled;
    const auto r = run_command("timeout 120 " + cmd);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto s = read_json(dir + "/out/summary.json");
    const auto& st = s["stragglers"];
    INFO(st.dump());
    REQUIRE(st["steps"] == 20);
    // Not "last in most steps": the throttle is wall-clock, so on a loaded 2-vCPU machine rank 1 can be last in only
    // half the steps (10 of 20 in a clean-clone CI run, 2026-11-27, with 4x rank 0's mean work). What it costs is
    // the signal: rank 1 caused more of the wait, and the closing line names it.
    CHECK(st["wait_caused_s_per_rank"][1].get<double>() > st["wait_caused_s_per_rank"][0].get<double>());
    CHECK_THAT(r.output, Catch::Contains("rank 1 was the slowest in"));
    // (Means, not medians: one slow first step on rank 0 can pull its mean up, so only the order is checked.)
    CHECK(st["mean_work_ms_per_rank"][1].get<double>() > st["mean_work_ms_per_rank"][0].get<double>());
    // Rank 0 waited for rank 1 in those steps, a real share of the run.
    CHECK(st["wait_for_slowest_s"].get<double>() > 0);
    CHECK(st["wait_for_slowest_fraction"].get<double>() > 0.05);
}

TEST_CASE("sync.balance speed gives a throttled rank fewer samples and keeps the 1 rank x N*B parameters",
          "[train][mpi][balance]") {
    const std::string dir = temp_dir("balance");
    write_file(dir + "/tiny.json", kTinyCnnNoDropout);
    const std::string common = R"(, "optimizer": {"name": "sgd", "lr": 0.1, "lr_scaling": "none"},
                                   "checkpoint": {"every_epochs": 0, "every_steps": )" + std::to_string(kSteps) + "}";
    write_file(dir + "/s.json", tiny_config(dir + "/tiny.json", dir + "/single", common));
    write_file(dir + "/m.json", tiny_config(dir + "/tiny.json", dir + "/multi", common));
    // 20 steps of 2 x 4000, one epoch. Rank 1 is stopped most of the time (SIGSTOP/SIGCONT, as in the straggler
    // test): its share of each step should shrink towards the floor of a quarter of 4000. (With 10 steps, on a VM
    // fast enough that the first new split came at the last exchange, the exchanges' sample counts were still even
    // in 1 of 3 runs; the parameters are compared at step 10, checkpointed in both runs.) A step's work must outlast
    // the throttle's few running milliseconds: at 2 x 1000 (~2.5 ms of work) rank 1 could finish a step's work
    // inside one running spell and be stopped only while it waited in the allreduce, so its measured speed was rank
    // 0's and the split never moved (3 of 9 runs on a fast VM, 2026-11-27).
    const std::string data = " --set data.synthetic_train_size=160000 --set train.max_steps=" + std::to_string(2 * kSteps);
    auto r = run_command(binary() + " train --config " + dir + "/s.json --set train.batch_size=8000" + data);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const std::string args = " train --config " + dir + "/m.json --set train.batch_size=4000 --set sync.balance=speed" + data;
    const std::string throttled = "bash -c '" + binary() + args +
                                  " & p=$!; while kill -STOP $p 2>/dev/null; do sleep 0.05; kill -CONT $p; sleep 0.005; done;"
                                  " wait $p'";
    r = run_command("timeout 180 " + mpirun(1) + binary() + args + " : -np 1 " + throttled);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto s = read_json(dir + "/multi/summary.json");
    const auto& bal = s["sync"]["balance"];
    INFO(bal.dump());
    CHECK(bal["mode"] == "speed");
    CHECK(bal["exchanges"].get<int>() >= 3);
    // Rank 0 read more than its even share in some step, rank 1 less, and the run ended with rank 1 reading less.
    // (Not "over the run rank 0 read more": on a fast VM the split moved both ways while a stop landed now in rank
    // 1's work, now in its wait, and the two ranks' samples came out even in 2 of 7 runs, 2026-11-27.)
    CHECK(bal["batch_max_per_rank"][0].get<int>() > 4000);
    CHECK(bal["batch_min_per_rank"][1].get<int>() < 4000);
    CHECK(bal["batch_min_per_rank"][1].get<int>() >= 1000);
    CHECK(bal["batch_last_per_rank"][1].get<int>() < 4000);
    CHECK(bal["batch_last_per_rank"][0].get<int>() + bal["batch_last_per_rank"][1].get<int>() == 8000);
    CHECK(s["parameters_identical"] == true);
    // The same samples in every step, the same mean gradient: the parameters of one rank at batch 2000, up to the
    // order of float sums (the uneven shares sum in other groups).
    CHECK(relative_difference(final_parameters(dir + "/single"), final_parameters(dir + "/multi")) < 1e-5);
}

TEST_CASE("mismatched models on two ranks: clear error on every rank, quick non-zero exit", "[train][mpi]") {
    const std::string dir = temp_dir("mismatch");
    write_file(dir + "/a.json", kTinyCnn);
    std::string other = kTinyCnn;
    other.replace(other.find("\"out_features\": 16"), 18, "\"out_features\": 17");
    write_file(dir + "/b.json", other);
    // The same config text in two folders, each beside its own copy of "m.json" (as two hosts would hold them): the
    // model key agrees, the files behind it do not.
    std::filesystem::create_directories(dir + "/host0");
    std::filesystem::create_directories(dir + "/host1");
    std::filesystem::copy_file(dir + "/a.json", dir + "/host0/m.json");
    std::filesystem::copy_file(dir + "/b.json", dir + "/host1/m.json");
    write_file(dir + "/host0/c.json", tiny_config("m.json", dir + "/out"));
    write_file(dir + "/host1/c.json", tiny_config("m.json", dir + "/out"));
    const std::string cmd = mpirun(1) + binary() + " train --config " + dir + "/host0/c.json : -np 1 " + binary() +
                            " train --config " + dir + "/host1/c.json";
    const auto r = run_command("timeout 60 " + cmd);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.seconds < 30);
    const std::string both = "ranks disagree on model.layers[5].out_features: rank 0 has 16, rank 1 has 17; every rank "
                             "must run the same config";
    CHECK_THAT(r.output, Catch::Contains("rank 0: " + both));
    CHECK_THAT(r.output, Catch::Contains("rank 1: " + both));
}

TEST_CASE("a rank that fails brings the whole job down with its message", "[train][mpi]") {
    const std::string dir = temp_dir("fail");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out"));
    const std::string base = "timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader,tcp -np 1 " +
                             binary() + " train --config " + dir + "/c.json : -np 1 " + binary() + " train --config " +
                             dir + "/c.json ";
    SECTION("during set-up: rank 1 cannot read its data") {
        const auto r = run_command(base + "--set data.format=idx --set data.dir=/nonexistent/data");
        INFO(r.output);
        CHECK(r.exit_code == 2);
        CHECK_THAT(r.output, Catch::Contains("/nonexistent/data"));
        CHECK(r.seconds < 30);
    }
    SECTION("before the communicator exists: rank 1's config is bad") {
        const auto r = run_command(base + "--set optimizer.lr=1e30");
        INFO(r.output);
        CHECK(r.exit_code == 2);
        CHECK_THAT(r.output, Catch::Contains("rank 1: "));
        CHECK_THAT(r.output, Catch::Contains("optimizer.lr: 1e+30 is out of range"));
        CHECK(r.seconds < 30);
    }
    SECTION("during training: the run diverges") {
        // On every rank: ranks with different learning rates are refused at start-up (test_disagreeing_ranks).
        const std::string lr = " --set optimizer.lr=1e6 --set optimizer.lr_scaling=none";
        const auto r = run_command("timeout 60 " + mpirun(1) + binary() + " train --config " + dir + "/c.json" + lr +
                                   " : -np 1 " + binary() + " train --config " + dir + "/c.json" + lr);
        INFO(r.output);
        CHECK(r.exit_code != 0);
        CHECK(r.exit_code != 124);
        CHECK_THAT(r.output, Catch::Contains("training diverged"));
        CHECK(r.seconds < 30);
    }
}

TEST_CASE("a run that fails still writes its timeline up to the failure", "[train][timeline]") {
    const std::string dir = temp_dir("fail-timeline");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out", R"(, "checkpoint": {"every_epochs": 0})"));
    // A learning rate this large makes the loss non-finite within a few steps: "training diverged", exit 1.
    const auto r = run_command("timeout 60 " + binary() + " train --config " + dir + "/c.json --set optimizer.lr=1e6 "
                               "--set optimizer.lr_scaling=none --timeline " + dir + "/trace.json");
    INFO(r.output);
    REQUIRE(r.exit_code == 1);
    REQUIRE_THAT(r.output, Catch::Contains("training diverged"));
    const auto trace = read_json(dir + "/trace.json");
    bool has_forward = false;
    std::string failure;
    for (const auto& e : trace["traceEvents"]) {
        has_forward = has_forward || e["name"] == "forward";
        if (e["name"] == "failed") failure = e["args"]["error"].get<std::string>();
    }
    CHECK(has_forward);
    CHECK_THAT(failure, Catch::Contains("training diverged"));
    CHECK_FALSE(std::filesystem::exists(dir + "/trace.json.tmp"));
}

TEST_CASE("a CPU rank with no core to spare for it trains without a prefetch thread", "[train][data]") {
    const std::string dir = temp_dir("prefetch_cores");
    write_file(dir + "/tiny.json", kTinyCnnNoDropout);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out", R"(, "checkpoint": {"every_epochs": 0})"));
    const std::string args = " train --config " + dir + "/c.json --set train.max_steps=5 --set device=cpu";
    int run = 0;  // an output.dir per run: a fresh run into a previous run's folder is refused
    auto prefetch_note = [&](const std::string& launch, const std::string& extra) {
        const std::string out = dir + "/out" + std::to_string(++run);
        const auto r = run_command("timeout 120 " + launch + " " + binary() + args + extra + " --set output.dir=" + out);
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        return read_json(out + "/summary.json")["data_prefetch"].get<std::string>();
    };
    // One CPU, one compute thread (what mpirun --bind-to core gives each rank).
    CHECK(prefetch_note("taskset -c 0", "") == "off (1 usable CPU for 1 compute thread: a prefetch thread could only time-slice with them)");
    // data.prefetch false says so, whatever the cores.
    CHECK(prefetch_note("taskset -c 0", " --set data.prefetch=false") == "off (data.prefetch false)");
    const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    if (cpus >= 2) {
        // Two CPUs, two compute threads: still none to spare.
        CHECK(prefetch_note("taskset -c 0,1", " --set train.threads=2") == "off (2 usable CPUs for 2 compute threads: a prefetch thread could only time-slice with them)");
        // Two CPUs, one compute thread: the thread starts (and its own probe may switch it off later).
        const std::string note = prefetch_note("taskset -c 0,1", "");
        CHECK((note == "on" || note.rfind("off after", 0) == 0));
    }
}

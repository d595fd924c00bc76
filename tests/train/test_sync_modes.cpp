// Gradient synchronisation options, end to end through mpirun: fusion and overlap change when and how
// gradients travel, never the arithmetic; accumulation and local SGD match their plain equivalents;
// 16-bit compression halves the traffic; the timeline is a valid Chrome trace.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "fixtures.hpp"

using namespace rt_test;

namespace {

constexpr size_t kParamTensors = 6;

// Final parameters of a run (the checkpoint written at its last step).
std::vector<float> final_parameters(const std::string& out, int steps) {
    std::string n = std::to_string(steps);
    return checkpoint_parameters(out + "/checkpoints/ckpt-" + std::string(9 - n.size(), '0') + n + ".bin", kParamTensors);
}

struct Run {
    std::string dir;
    nlohmann::json summary;
};

Run train(const std::string& base, const std::string& name, int ranks, const std::string& sets, int steps = 12) {
    const std::string out = base + "/" + name;
    const std::string cmd = (ranks > 1 ? mpirun(ranks) : std::string()) + binary() + " train --config " + base +
                            "/c.json --set output.dir=" + out + " --set train.max_steps=" + std::to_string(steps) + " " +
                            sets;
    const auto r = run_command(cmd);
    INFO(cmd << "\n" << r.output);
    REQUIRE(r.exit_code == 0);
    return {out, read_json(out + "/summary.json")};
}

std::string setup(const std::string& name) {
    const std::string dir = temp_dir(name);
    write_file(dir + "/tiny.json", kTinyCnnNoDropout);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/unused",
                                            R"(, "optimizer": {"name": "sgd", "lr": 0.1, "lr_scaling": "none"},
                                               "checkpoint": {"every_epochs": 0, "every_steps": 1000})"));
    return dir;
}

}  // namespace

TEST_CASE("fused, unfused, overlapped and blocking synchronisation reach the same parameters", "[train][mpi][sync]") {
    const std::string dir = setup("fusion");
    for (int n : {2, 3, 4}) {
        SECTION(std::to_string(n) + " ranks") {
            const auto ref = train(dir, "ref" + std::to_string(n), n, "--set sync.overlap=false");
            const auto a = final_parameters(ref.dir, 12);
            for (const std::string variant : {"--set sync.fusion_bytes=0", "--set sync.fusion_bytes=600",
                                              "--set sync.overlap=true", "--set sync.fusion_bytes=0 --set sync.overlap=true",
                                              "--set sync.backend=mpi --set sync.fusion_bytes=300"}) {
                INFO(variant);
                // Appended rather than "v" + to_string(...): GCC 12 warns falsely on that form (-Wrestrict, PR 105329).
                std::string name = "v";
                name += std::to_string(n);
                name += std::to_string(std::hash<std::string>{}(variant));
                const auto run = train(dir, name, n, variant);
                CHECK(run.summary["parameters_identical"] == true);
                CHECK(relative_difference(a, final_parameters(run.dir, 12)) < 1e-5);
            }
        }
    }
}

TEST_CASE("k accumulated passes of batch B equal one pass of batch k*B", "[train][mpi][sync]") {
    const std::string dir = setup("accum");
    for (int n : {1, 2}) {
        SECTION(std::to_string(n) + " ranks") {
            const auto big = train(dir, "big" + std::to_string(n), n, "--set train.batch_size=24");
            const auto acc = train(dir, "acc" + std::to_string(n), n,
                                   "--set train.batch_size=8 --set sync.backward_passes_per_step=3");
            CHECK(acc.summary["steps"] == 12);
            CHECK(relative_difference(final_parameters(big.dir, 12), final_parameters(acc.dir, 12)) < 1e-5);
        }
    }
}

TEST_CASE("local SGD: period 1 equals gradient averaging; longer periods end with one model", "[train][mpi][sync]") {
    const std::string dir = setup("localsgd");
    const auto ref = train(dir, "ref", 2, "");
    const auto h1 = train(dir, "h1", 2, "--set sync.mode=local_sgd --set sync.local_sgd_period=1");
    CHECK(relative_difference(final_parameters(ref.dir, 12), final_parameters(h1.dir, 12)) < 1e-5);
    const auto h4 = train(dir, "h4", 3, "--set sync.mode=local_sgd --set sync.local_sgd_period=4");
    CHECK(h4.summary["parameters_identical"] == true);
    // Fewer collectives: parameters every 4 steps instead of gradients every step (same size).
    CHECK(h4.summary["bytes_sent"].get<double>() < 0.5 * ref.summary["bytes_sent"].get<double>());
    // And the run really diverged between averagings: it differs from gradient averaging.
    const auto ref3 = train(dir, "ref3", 3, "");
    CHECK(relative_difference(final_parameters(ref3.dir, 12), final_parameters(h4.dir, 12)) > 1e-4);
}

TEST_CASE("16-bit compression halves the bytes and stays close to fp32", "[train][mpi][sync]") {
    const std::string dir = setup("compress");
    // Size-only buckets: a cycle-time layout adds one small broadcast of the layout to this communicator's bytes.
    const std::string sized = "--set sync.cycle_time_ms=0 ";
    const auto fp32 = train(dir, "fp32", 2, sized);
    for (const std::string c : {"fp16", "bf16"}) {
        INFO(c);
        const auto run = train(dir, c, 2, sized + "--set sync.compression=" + c);
        CHECK(run.summary["parameters_identical"] == true);
        // The gradients' own communicator carries exactly half; start-up broadcasts and metrics stay fp32.
        const double ratio = run.summary["sync"]["gradient_bytes_sent"].get<double>() /
                             fp32.summary["sync"]["gradient_bytes_sent"].get<double>();
        CHECK(ratio == Approx(0.5).margin(1e-9));
        CHECK(run.summary["bytes_sent"].get<double>() < 0.6 * fp32.summary["bytes_sent"].get<double>());
        // Each bucket's bandwidth is of the bytes it put on the wire: half its float32 bytes.
        for (const auto& b : run.summary["sync"]["buckets"]) {
            CHECK(b["wire_bytes"].get<double>() == Approx(0.5 * b["bytes"].get<double>()).margin(1));
            const double calls = b["calls"].get<double>(), mean_s = b["mean_ms"].get<double>() / 1e3;
            if (calls > 0 && mean_s > 0)
                CHECK(b["busbw_gbs"].get<double>() ==
                      Approx(b["wire_bytes"].get<double>() / mean_s / 1e9 * 2.0 * (2 - 1) / 2).epsilon(1e-6));
        }
        CHECK(relative_difference(final_parameters(fp32.dir, 12), final_parameters(run.dir, 12)) < (c == "fp16" ? 1e-2 : 5e-2));
    }
}

TEST_CASE("the timeline is valid Chrome trace JSON with the expected spans", "[train][mpi][sync]") {
    const std::string dir = setup("timeline");
    const auto run = train(dir, "tl", 2, "--set output.timeline=" + dir + "/trace.json --set sync.fusion_bytes=600", 3);
    // Rank 0 writes the named file, rank 1 the same name with ".rank1"; open them together in Perfetto.
    std::set<std::string> names;
    std::set<int> pids;
    for (const std::string& file : {dir + "/trace.json", dir + "/trace.json.rank1"}) {
        const auto trace = read_json(file);
        REQUIRE(trace.contains("traceEvents"));
        for (const auto& e : trace["traceEvents"]) {
            names.insert(e["name"].get<std::string>());
            if (e.contains("pid")) pids.insert(e["pid"].get<int>());
        }
    }
    for (const char* want : {"data", "forward", "backward", "optimizer", "sync_wait", "evaluate"}) {
        INFO(want);
        CHECK(names.count(want) == 1);
    }
    bool has_layer = false, has_bucket = false;
    for (const auto& n : names) {
        has_layer = has_layer || n.rfind("backward ", 0) == 0;
        has_bucket = has_bucket || n.find("allreduce") != std::string::npos;
    }
    CHECK(has_layer);
    CHECK(has_bucket);
    CHECK(pids.size() == 2);  // one process per rank
}

// `ringtrain info` reports ranks, hosts and local ranks from MPI itself.
#include <catch2/catch.hpp>

#include <fstream>

#include "ringtrain/core/memory.hpp"
#include "support/run_command.hpp"

using namespace rt_test;

TEST_CASE("info lists every rank with its local rank", "[cli][mpi]") {
    const auto r = run_command(mpirun(2) + binary() + " info");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("2 rank(s) on 1 host(s)"));
    CHECK_THAT(r.output, Catch::Contains("rank 1: host"));
    CHECK_THAT(r.output, Catch::Contains("local rank 1 of 2"));
    CHECK_THAT(r.output, Catch::Contains("backends built: ring, mpi"));
    // Both ranks on this host: the ring backend reduces through shared memory, unless told not to.
    CHECK_THAT(r.output, Catch::Contains("ring transport: shared memory inside this host"));
    const auto off = run_command("RINGTRAIN_SHARED_MEMORY=0 " + mpirun(2) + binary() + " info");
    INFO(off.output);
    REQUIRE(off.exit_code == 0);
    CHECK_THAT(off.output, Catch::Contains("ring transport: MPI point-to-point (shared memory off)"));
}

TEST_CASE("info names the device each rank would train on", "[cli][mpi]") {
    const bool gpu = ringtrain::cuda_available();
    const std::string info = "cd " + source_dir() + " && " + mpirun(2) + binary() + " info";
    // Default (auto): a visible GPU per rank (local rank modulo the GPUs), else the CPU.
    auto r = run_command(info);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    for (const std::string rank : {"local rank 0 of 2, device ", "local rank 1 of 2, device "})
        CHECK_THAT(r.output, Catch::Contains(rank + (gpu ? "" : "cpu\n")) && Catch::Contains(gpu ? "(cuda:" : rank));
    // The config's choice: cpu whatever the machine has; cuda where none is usable says why, on every rank.
    r = run_command(info + " --config configs/logreg_fashion.json --set device=cpu");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("local rank 0 of 2, device cpu\n") &&
                             Catch::Contains("local rank 1 of 2, device cpu\n"));
    r = run_command(info + " --config configs/logreg_fashion.json --set device=cuda");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    if (!gpu)
        for (const std::string rank : {"local rank 0 of 2, ", "local rank 1 of 2, "})
            CHECK_THAT(r.output, Catch::Contains(rank + "device none (device: cuda was asked for but this build has no "
                                                        "CUDA support or no GPU is visible"));
    else
        CHECK_THAT(r.output, Catch::Contains("local rank 1 of 2, device ") && Catch::Contains("(cuda:"));
}

TEST_CASE("--timeline FILE writes a Chrome trace", "[cli]") {
    const std::string dir = temp_dir("timeline-flag");
    const auto r = run_command("cd " + source_dir() + " && " + binary() +
                               " train --config configs/logreg_fashion.json --set data.format=synthetic"
                               " --set data.synthetic_shape=[784] --set train.max_steps=5 --set output.progress=none"
                               " --set output.dir=" + dir + "/out --timeline " + dir + "/trace.json");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto trace = read_json(dir + "/trace.json");
    bool has_forward = false;
    for (const auto& e : trace["traceEvents"]) has_forward = has_forward || e["name"] == "forward";
    CHECK(has_forward);
}

TEST_CASE("--timeline may name a file in the run's own output.dir before it exists", "[cli]") {
    const std::string dir = temp_dir("timeline-in-output-dir");
    const std::string base = binary() + " train --config " + source_dir() + "/configs/logreg_fashion.json"
                             " --set data.format=synthetic --set data.synthetic_shape=[784] --set train.max_steps=5"
                             " --set output.progress=none";
    auto r = run_command(base + " --set output.dir=" + dir + "/run --timeline " + dir + "/run/trace.json");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(read_json(dir + "/run/trace.json")["traceEvents"].size() > 0);
    // Any other missing folder is still refused before training.
    r = run_command(base + " --set output.dir=" + dir + "/run2 --timeline " + dir + "/elsewhere/trace.json");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("output.timeline: the folder"));
}

// A sweep's --set that switches the optimizer leaves the file's momentum unread: a note on rank 0, and the run goes
// on (the same key given by --set, or in a file whose own optimizer leaves it unread, is refused: test_config_usage).
TEST_CASE("a config file's key that a --set leaves unread is named in a note once, and the run goes on", "[cli][mpi]") {
    const std::string dir = temp_dir("unused-key-note");
    std::ofstream(dir + "/c.json") << R"({"model": ")" << source_dir() << R"(/models/logreg.json",
        "data": {"format": "synthetic", "synthetic_shape": [784]}, "optimizer": {"name": "sgd", "momentum": 0.9}})";
    const auto r = run_command(mpirun(2) + binary() + " train --config " + dir + "/c.json --set optimizer.name=adam"
                               " --set train.max_steps=3 --set output.progress=none --set output.dir=" + dir + "/out");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const std::string note = "ringtrain: note: optimizer.momentum in " + dir + "/c.json is not used with "
                             "optimizer.name 'adam' (--set optimizer.name=adam); it is ignored in this run";
    CHECK_THAT(r.output, Catch::Contains(note));
    CHECK(r.output.find(note) == r.output.rfind(note));  // rank 0 alone
}

TEST_CASE("a command's missing argument under mpirun ends the job with one line a rank, not MPI_Abort", "[cli][mpi]") {
    const auto r = run_command("cd " + source_dir() + " && " + mpirun(2) + binary() +
                               " eval --config configs/logreg_fashion.json");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("rank 0: eval needs --config FILE and --checkpoint CKPT") &&
                             Catch::Contains("rank 1: eval needs --config FILE and --checkpoint CKPT"));
    CHECK(r.output.find("MPI_ABORT") == std::string::npos);
}

TEST_CASE("a run whose model stayed at chance says so, with the learning rate; one that learnt does not", "[cli]") {
    const std::string dir = temp_dir("stalled-learning");
    const std::string base = "cd " + source_dir() + " && " + binary() +
                             " train --config configs/lenet5_fashion.json --set data.format=synthetic"
                             " --set data.synthetic_train_size=2048 --set data.synthetic_test_size=256"
                             " --set train.max_steps=40 --set checkpoint.every_epochs=0 --set output.progress=none";
    // Adam at lr 0.008 (0.001 x 8, what lr_scaling linear gave 8 ranks on the 16-vCPU host) kills LeNet-5's units.
    auto r = run_command(base + " --set optimizer.lr=0.008 --set output.dir=" + dir + "/high");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("note: the model did not learn") &&
                             Catch::Contains("the learning rate was 0.008; try a smaller optimizer.lr"));
    CHECK(read_json(dir + "/high/summary.json")["learning_stalled"].is_string());
    r = run_command(base + " --set output.dir=" + dir + "/default");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("did not learn") == std::string::npos);
    CHECK(read_json(dir + "/default/summary.json")["learning_stalled"].is_null());
}

// OpenBLAS's SSE3 fallback kernels on a CPU with AVX2/AVX-512 (a DYNAMIC_ARCH OpenBLAS older than the CPU model):
// ringtrain starts again with OPENBLAS_CORETYPE set, so unset it never runs them; a user's choice is left alone, and
// `info` says what would be faster.
TEST_CASE("ringtrain never runs OpenBLAS's SSE3 kernels on an AVX2 CPU unless told to", "[cli]") {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2")) return;  // nothing faster to pick
    auto r = run_command("env -u OPENBLAS_CORETYPE " + binary() + " info");
    REQUIRE(r.exit_code == 0);
    if (r.output.find("cpu gemm: OpenBLAS") == std::string::npos) return;  // an Eigen build
    for (const char* fallback : {" Prescott ", " Nehalem ", " Core2 ", " Katmai "}) CHECK(r.output.find(fallback) == std::string::npos);
    r = run_command("OPENBLAS_CORETYPE=Prescott " + binary() + " info");
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("(OPENBLAS_CORETYPE=Prescott from the environment; ") &&
                             Catch::Contains(" would be faster on this CPU)"));
}

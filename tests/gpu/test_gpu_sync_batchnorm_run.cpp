// sync.batchnorm on a GPU through the binary, as test_sync_batchnorm_run does on the CPU: 2 ranks x batch 8 on one
// GPU (device cuda, the ring backend: NCCL would need a GPU per rank) with synchronised BatchNorm reach the
// parameters and running stats of 1 rank x batch 16 on the GPU; per-rank BatchNorm does not (the comparison is not
// vacuous). TF32 convolutions are switched off (RINGTRAIN_CUDNN_TF32=0) so that the two batch sizes differ only by
// the order of float sums: 1e-4 relative instead of the CPU test's 1e-5.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "train/fixtures.hpp"

using namespace rt_test;

namespace {

constexpr int kSteps = 10;

}  // namespace

TEST_CASE("gpu sync.batchnorm: 2 ranks x B on one GPU reach the parameters of 1 rank x 2B", "[gpu][mpi][syncbn]") {
    const std::string dir = temp_dir("gpu_sync_bn_run");
    write_file(dir + "/bn.json", kSyncBnModel);
    const std::string common = R"(, "device": "cuda", "sync": {"backend": "ring"},
                                   "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "lr_scaling": "none"},
                                   "checkpoint": {"every_epochs": 0, "every_steps": )" + std::to_string(kSteps) + "}";
    const std::string steps = " --set train.max_steps=" + std::to_string(kSteps);
    const std::string env = "RINGTRAIN_CUDNN_TF32=0 ";
    const std::string two_ranks = mpirun(2) + "-x RINGTRAIN_CUDNN_TF32 ";
    auto run = [&](const std::string& name, const std::string& launcher, const std::string& sets) {
        write_file(dir + "/" + name + ".json", tiny_config(dir + "/bn.json", dir + "/" + name, common));
        auto r =
            run_command(env + launcher + binary() + " train --config " + dir + "/" + name + ".json" + steps + sets);
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        return checkpoint_parameters(dir + "/" + name + "/checkpoints/ckpt-0000000" + std::to_string(kSteps) + ".bin",
                                     kSyncBnTensors);
    };
    const auto single = run("single", "", " --set train.batch_size=16");
    const auto synced = run("synced", two_ranks, " --set train.batch_size=8 --set sync.batchnorm=true");
    const auto local = run("local", two_ranks, " --set train.batch_size=8");
    CHECK(relative_difference(single, synced) < 1e-4);
    // Per-rank statistics normalise each half with its own mean and variance: a different model.
    CHECK(relative_difference(single, local) > 1e-3);
    const auto s = read_json(dir + "/synced/summary.json");
    CHECK(s["parameters_identical"] == true);
    CHECK(s["sync"]["batchnorm"] == true);
    CHECK(s["device"].get<std::string>().find("cuda") != std::string::npos);
}

// sync.batchnorm through the binary: 2 ranks x batch 8 with synchronised BatchNorm reach the parameters and running
// stats of 1 rank x batch 16 (per-rank BatchNorm does not: the comparison is not vacuous); the refusals (local_sgd),
// and a model without batchnorm, for which the key changes nothing.
#include <catch2/catch.hpp>

#include <cmath>

#include "fixtures.hpp"

using namespace rt_test;

namespace {

constexpr int kSteps = 10;

std::vector<float> final_tensors(const std::string& out) {
    return checkpoint_parameters(out + "/checkpoints/ckpt-0000000" + std::to_string(kSteps) + ".bin", kSyncBnTensors);
}

}  // namespace

TEST_CASE("sync.batchnorm: 2 ranks x B reach the parameters of 1 rank x 2B", "[train][mpi][syncbn]") {
    const std::string dir = temp_dir("sync_bn_run");
    write_file(dir + "/bn.json", kSyncBnModel);
    const std::string common = R"(, "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "lr_scaling": "none"},
                                   "checkpoint": {"every_epochs": 0, "every_steps": )" + std::to_string(kSteps) + "}";
    const std::string steps = " --set train.max_steps=" + std::to_string(kSteps);
    auto run = [&](const std::string& name, const std::string& launcher, const std::string& sets) {
        write_file(dir + "/" + name + ".json", tiny_config(dir + "/bn.json", dir + "/" + name, common));
        auto r = run_command(launcher + binary() + " train --config " + dir + "/" + name + ".json" + steps + sets);
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        return final_tensors(dir + "/" + name);
    };
    const auto single = run("single", "", " --set train.batch_size=16");
    const auto synced = run("synced", mpirun(2), " --set train.batch_size=8 --set sync.batchnorm=true");
    const auto local = run("local", mpirun(2), " --set train.batch_size=8");
    CHECK(relative_difference(single, synced) < 1e-5);
    // Per-rank statistics normalise each half with its own mean and variance: a different model.
    CHECK(relative_difference(single, local) > 1e-3);
    const auto s = read_json(dir + "/synced/summary.json");
    CHECK(s["parameters_identical"] == true);
    CHECK(s["sync"]["batchnorm"] == true);
}

TEST_CASE("sync.batchnorm: refused with local_sgd; nothing to do for a model without batchnorm", "[train][syncbn]") {
    const std::string dir = temp_dir("sync_bn_refuse");
    write_file(dir + "/bn.json", kSyncBnModel);
    write_file(dir + "/plain.json", kTinyCnnNoDropout);
    write_file(dir + "/bn_cfg.json", tiny_config(dir + "/bn.json", dir + "/out_bn"));
    write_file(dir + "/plain_cfg.json", tiny_config(dir + "/plain.json", dir + "/out_plain"));
    auto r = run_command(binary() + " train --config " + dir + "/bn_cfg.json --set sync.batchnorm=true "
                         "--set sync.mode=local_sgd --set train.max_steps=2");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("sync.batchnorm: true needs sync.mode allreduce"));
    r = run_command(mpirun(2) + binary() + " train --config " + dir + "/plain_cfg.json --set sync.batchnorm=true "
                    "--set sync.mode=local_sgd --set train.max_steps=2");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, !Catch::Contains("batchnorm"));
}

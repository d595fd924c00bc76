// BatchNorm through the binary at 2 ranks: the running statistics are averaged across ranks before evaluation and
// checkpoints, and a checkpoint carries them (eval of the checkpoint on one rank gives the run's test loss).
#include <catch2/catch.hpp>

#include "fixtures.hpp"

using namespace rt_test;

namespace {
// conv -> batchnorm2d -> relu -> avgpool2d -> flatten -> linear -> batchnorm1d -> relu -> linear on 1x8x8 inputs.
const char* kTinyBn = R"({
  "name": "tiny_bn",
  "layers": [
    {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
    {"type": "batchnorm2d"}, {"type": "relu"},
    {"type": "avgpool2d", "kernel": 2},
    {"type": "flatten"},
    {"type": "linear", "out_features": 8},
    {"type": "batchnorm1d", "momentum": 0.3}, {"type": "relu"},
    {"type": "linear", "out_features": 4}
  ]
})";
}  // namespace

TEST_CASE("batchnorm running stats: one model on every rank, saved in checkpoints", "[train][batchnorm][mpi]") {
    const std::string dir = temp_dir("batchnorm_run");
    write_file(dir + "/bn.json", kTinyBn);
    write_file(dir + "/c.json", tiny_config(dir + "/bn.json", dir + "/out",
                                            R"(, "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9})"));
    const auto r = run_command(mpirun(2) + binary() + " train --config " + dir + "/c.json --set train.max_steps=20");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto summary = read_json(dir + "/out/summary.json");
    const auto line = eval_checkpoint_line(dir, 20);
    // The 2-rank evaluation (each rank half the test set, with the averaged stats) and the 1-rank evaluation of the
    // checkpoint agree: without the averaging or without the stats in the checkpoint they would not.
    CHECK(line["test_loss"].get<double>() == Approx(summary["test_loss"].get<double>()).epsilon(1e-6));
    CHECK(line["test_accuracy"] == summary["test_accuracy"]);
}

TEST_CASE("batchnorm at 2 ranks: step checkpoints do not change the run", "[train][batchnorm][mpi][resume]") {
    // A checkpoint saves the ranks' average of the running statistics; made in place, it moved the statistics of
    // every run with checkpoint.every_steps away from the same run without (test_loss in its last digits).
    const std::string dir = temp_dir("batchnorm_ckpt_schedule");
    write_file(dir + "/bn.json", kTinyBn);
    nlohmann::json test_loss[2];
    for (int every : {0, 3}) {
        const std::string out = dir + "/out" + std::to_string(every);
        write_file(dir + "/c.json", tiny_config(dir + "/bn.json", out,
                                                R"(, "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9})"));
        const auto r = run_command(mpirun(2) + binary() + " train --config " + dir +
                                   "/c.json --set train.max_steps=40 --set checkpoint.every_steps=" +
                                   std::to_string(every));
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        test_loss[every == 0 ? 0 : 1] = read_json(out + "/summary.json")["test_loss"];
    }
    REQUIRE(test_loss[0].is_number());
    CHECK(test_loss[0].get<double>() == test_loss[1].get<double>());  // bit for bit, through an epoch's end
}

TEST_CASE("batchnorm at 2 ranks: a resume inside an epoch continues bit for bit", "[train][batchnorm][mpi][resume]") {
    // Each rank keeps its own running statistics between evaluations; a checkpoint inside an epoch holds their
    // average for eval and every rank's own for a resume. Resumed from the average instead, the statistics (and the
    // test figures computed with them) differed from the uninterrupted run's in their last digits.
    const std::string dir = temp_dir("batchnorm_resume_mid_epoch");
    write_file(dir + "/bn.json", kTinyBn);
    nlohmann::json summary[2];
    for (int stopped : {0, 1}) {
        const std::string out = dir + "/out" + std::to_string(stopped);
        write_file(dir + "/c.json", tiny_config(dir + "/bn.json", out,
                                                R"(, "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9})"));
        const std::string run = mpirun(2) + binary() + " train --config " + dir + "/c.json";
        if (stopped == 1) {  // 30 steps an epoch: 37 is the 7th step of the second
            const auto first = run_command(run + " --set train.max_steps=37");
            INFO(first.output);
            REQUIRE(first.exit_code == 0);
        }
        const auto r = run_command(run + " --set train.max_steps=45" +
                                   (stopped == 1 ? " --set checkpoint.resume=auto" : ""));
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        summary[stopped] = read_json(out + "/summary.json");
    }
    REQUIRE(summary[0]["test_loss"].is_number());
    CHECK(summary[0]["test_loss"].get<double>() == summary[1]["test_loss"].get<double>());
    CHECK(summary[0]["test_accuracy"] == summary[1]["test_accuracy"]);
}

// Checkpoint and resume: a run stopped part-way and resumed continues exactly as an uninterrupted one.
#include <catch2/catch.hpp>

#include <filesystem>

#include "fixtures.hpp"

using namespace rt_test;
namespace fs = std::filesystem;

namespace {
std::vector<double> step_losses(const std::string& metrics) {
    std::vector<double> v;
    for (const auto& r : read_jsonl(metrics))
        if (r["type"] == "step") v.push_back(r["loss"].get<double>());
    return v;
}
}  // namespace

TEST_CASE("resume after max_steps reproduces the uninterrupted loss sequence", "[train][checkpoint]") {
    const std::string dir = temp_dir("resume");
    write_file(dir + "/tiny.json", kTinyCnn);
    // Momentum and Adam state and dropout RNG all have to survive the checkpoint for the sequences to agree.
    for (const std::string opt : {R"("optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9})",
                                  R"("optimizer": {"name": "adam", "lr": 0.01})"}) {
        SECTION(opt) {
            const std::string a = dir + "/a", b = dir + "/b";
            write_file(dir + "/a.json", tiny_config(dir + "/tiny.json", a, ", " + opt));
            write_file(dir + "/b.json", tiny_config(dir + "/tiny.json", b, ", " + opt));
            // 60 steps per epoch, 120 in all: stop in epoch 1 (step 37), again in epoch 2 (step 85), then finish.
            auto r = run_command(binary() + " train --config " + dir + "/a.json");
            INFO(r.output);
            REQUIRE(r.exit_code == 0);
            r = run_command(binary() + " train --config " + dir + "/b.json --set train.max_steps=37");
            REQUIRE(r.exit_code == 0);
            auto partial = read_json(b + "/summary.json");
            CHECK(partial["steps"] == 37);
            CHECK(partial["stopped_by_max_steps"] == true);
            REQUIRE(fs::exists(b + "/checkpoints/latest"));
            r = run_command(binary() + " train --config " + dir + "/b.json --set train.max_steps=85 --set checkpoint.resume=auto");
            REQUIRE(r.exit_code == 0);
            r = run_command(binary() + " train --config " + dir + "/b.json --set checkpoint.resume=auto");
            REQUIRE(r.exit_code == 0);

            const auto la = step_losses(a + "/metrics.jsonl");
            const auto lb = step_losses(b + "/metrics.jsonl");
            REQUIRE(la.size() == 120);
            REQUIRE(lb.size() == la.size());
            for (size_t i = 0; i < la.size(); ++i) {
                INFO("step " << i + 1);
                REQUIRE(lb[i] == la[i]);  // bit-for-bit: same arithmetic in the same order
            }
            const auto sa = read_json(a + "/summary.json");
            const auto sb = read_json(b + "/summary.json");
            CHECK(sb["steps"] == 120);
            CHECK(sb["test_accuracy"] == sa["test_accuracy"]);
            CHECK(sb["test_loss"] == sa["test_loss"]);
            CHECK(sb["parameter_hash_per_rank"] == sa["parameter_hash_per_rank"]);
            CHECK(sb["train_loss"] == sa["train_loss"]);  // both epochs had a stop inside
            CHECK(sb["resumed_from"].is_string());
        }
    }
}

TEST_CASE("a stop between two logged steps: the resumed run's next line covers the same steps as an uninterrupted "
          "run's", "[train][checkpoint][metrics]") {
    const std::string dir = temp_dir("resume-window");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/a", R"(, "optimizer": {"name": "sgd", "lr": 0.05})"));
    // Lines every 4 steps; the stop at step 37 falls between the lines of steps 36 and 40.
    const std::string run = binary() + " train --config " + dir + "/c.json --set train.log_every_steps=4 --set train.epochs=1";
    auto r = run_command(run);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    r = run_command(run + " --set output.dir=" + dir + "/b --set train.max_steps=37");
    REQUIRE(r.exit_code == 0);
    r = run_command(run + " --set output.dir=" + dir + "/b --set checkpoint.resume=auto");
    REQUIRE(r.exit_code == 0);
    const auto la = step_losses(dir + "/a/metrics.jsonl"), lb = step_losses(dir + "/b/metrics.jsonl");
    REQUIRE(la.size() == 15);  // steps 4, 8, ..., 60
    // The stopped run logged its last step (37: the mean over 37, after 36's line), an extra line; every other line is
    // the uninterrupted run's: step 40's is the mean over steps 37-40 in both.
    std::vector<int64_t> steps_b;
    for (const auto& l : read_jsonl(dir + "/b/metrics.jsonl"))
        if (l["type"] == "step") steps_b.push_back(l["global_step"].get<int64_t>());
    REQUIRE(lb.size() == 16);
    REQUIRE(steps_b[9] == 37);
    auto without_stop = lb;
    without_stop.erase(without_stop.begin() + 9);
    CHECK(without_stop == la);
    // The epoch's mean training loss too: the checkpoint carries each rank's partial sum, which the resumed run
    // continues, so the epoch sums its steps in the same order as the uninterrupted run (not a + b in two pieces).
    const auto sa = read_json(dir + "/a/summary.json"), sb = read_json(dir + "/b/summary.json");
    CHECK(sb["train_loss"] == sa["train_loss"]);
}

TEST_CASE("a resume with another batch size, seed or training set is refused even where the steps per epoch agree",
          "[train][checkpoint]") {
    const std::string dir = temp_dir("resume-same");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/a", R"(, "optimizer": {"name": "sgd", "lr": 0.05})"));
    const std::string run = binary() + " train --config " + dir + "/c.json --set train.epochs=1";
    auto r = run_command(run + " --set train.max_steps=5");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    // 480 samples at batch 8 = 60 steps an epoch; 484 samples give 60 too, and another seed changes nothing in it.
    r = run_command(run + " --set checkpoint.resume=auto --set train.seed=12345");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("written with train.seed 7, this run has 12345"));
    r = run_command(run + " --set checkpoint.resume=auto --set data.synthetic_train_size=484");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("written for a training set of 480 samples, this run's has 484"));
    r = run_command(run + " --set checkpoint.resume=auto");
    CHECK(r.exit_code == 0);
}

TEST_CASE("checkpoints are kept to checkpoint.keep and eval reads them", "[train][checkpoint]") {
    const std::string dir = temp_dir("keep");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out",
                                            R"(, "checkpoint": {"every_steps": 10, "keep": 2})"));
    auto r = run_command(binary() + " train --config " + dir + "/c.json");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir + "/out/checkpoints"))
        if (e.path().extension() == ".bin") ++n;
    CHECK(n == 2);
    std::string latest;
    std::ifstream(dir + "/out/checkpoints/latest") >> latest;
    CHECK(latest == "ckpt-000000120.bin");
    r = run_command(binary() + " eval --config " + dir + "/c.json --checkpoint " + dir + "/out/checkpoints/" + latest);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto summary = read_json(dir + "/out/summary.json");
    const auto line = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    CHECK(line["test_accuracy"] == summary["test_accuracy"]);
    CHECK(line["test_samples"].is_number_integer());  // a count, written as one
    CHECK(line["test_samples"] == 96);
    CHECK(summary["model_file"] == dir + "/tiny.json");  // the file the config's model resolved to
    // The run's output.dir, its checkpoints folder and `latest` evaluate the checkpoint `latest` names.
    for (const std::string& given : {dir + "/out", dir + "/out/checkpoints", dir + "/out/checkpoints/latest"}) {
        r = run_command(binary() + " eval --config " + dir + "/c.json --checkpoint " + given);
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        const auto from_folder = nlohmann::json::parse(r.output.substr(r.output.find('{')));
        CHECK(from_folder["checkpoint"] == dir + "/out/checkpoints/" + latest);
        CHECK(from_folder["test_accuracy"] == summary["test_accuracy"]);
    }
    // The newest damaged: the folder evaluates the newest that verifies, and says what it passed over.
    const std::string older = dir + "/out/checkpoints/ckpt-000000110.bin";
    REQUIRE(fs::exists(older));
    fs::resize_file(dir + "/out/checkpoints/" + latest, 100);
    r = run_command(binary() + " eval --config " + dir + "/c.json --checkpoint " + dir + "/out");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("warning: evaluating " + older + ", the newest checkpoint that verifies"));
    CHECK(nlohmann::json::parse(r.output.substr(r.output.find('{')))["checkpoint"] == older);
    // A folder without checkpoints, or nothing at all: exit 2 with what --checkpoint takes.
    for (const std::string& given : {dir, dir + "/nothing-here"}) {
        r = run_command(binary() + " eval --config " + dir + "/c.json --checkpoint " + given);
        CHECK(r.exit_code == 2);
        CHECK_THAT(r.output, Catch::Contains("--checkpoint " + given));
        CHECK_THAT(r.output, Catch::Contains("output.dir"));
    }
    // A file that is not a checkpoint is bad input.
    write_file(dir + "/junk.bin", "not a checkpoint at all");
    r = run_command(binary() + " eval --config " + dir + "/c.json --checkpoint " + dir + "/junk.bin");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("not a ringtrain checkpoint"));
}

TEST_CASE("a max_steps stop after an epoch's end reports the final model's test figures, not the epoch's",
          "[train][checkpoint]") {
    const std::string dir = temp_dir("stop-after-epoch");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out", R"(, "optimizer": {"name": "sgd", "lr": 0.05})"));
    // 60 steps an epoch: the epoch's evaluation is at step 60, the run ends at 85.
    const auto r = run_command(binary() + " train --config " + dir + "/c.json --set train.max_steps=85");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto summary = read_json(dir + "/out/summary.json");
    const auto line = eval_checkpoint_line(dir, 85);
    CHECK(line["test_loss"] == summary["test_loss"]);
    CHECK(line["test_accuracy"] == summary["test_accuracy"]);
    double epoch_test_loss = 0;
    for (const auto& l : read_jsonl(dir + "/out/metrics.jsonl"))
        if (l["type"] == "epoch") epoch_test_loss = l["test_loss"].get<double>();
    CHECK(epoch_test_loss != summary["test_loss"].get<double>());  // the epoch's figures were another model's
}

TEST_CASE("step checkpoints are timed apart: training time and samples/s leave them out", "[train][checkpoint][mpi]") {
    const std::string dir = temp_dir("checkpoint-time");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/c.json", tiny_config(dir + "/tiny.json", dir + "/out", R"(, "optimizer": {"name": "sgd", "lr": 0.05})"));
    // A checkpoint after every one of 60 steps at 2 ranks: written by rank 0 while rank 1 waits.
    const auto r = run_command(mpirun(2) + binary() + " train --config " + dir + "/c.json --set train.epochs=2 "
                               "--set train.max_steps=60 --set checkpoint.every_steps=1 --set checkpoint.keep=2");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto s = read_json(dir + "/out/summary.json");
    double phases = 0;
    for (const auto& [name, seconds] : s["phase_s"].items()) phases += seconds.get<double>();
    const double train = s["train_s"].get<double>(), checkpoints = s["checkpoint_s"].get<double>();
    INFO("train_s " << train << ", phases " << phases << ", checkpoint_s " << checkpoints);
    CHECK(checkpoints > 0);
    // Before, the checkpoints' time sat in train_s outside every phase (44 % of it in the review's LeNet-5 run), and
    // rank 1's wait for rank 0's writes in its next allreduce.
    // Under load (ctest -j) the gaps between phases grow too, so either bound will do; without the fix the gap was
    // the checkpoints' whole time, most of train_s here.
    CHECK((train - phases < 0.5 * checkpoints || train - phases < 0.15 * train));
    CHECK(s["samples_per_s"].get<double>() == Approx(60.0 * 8 * 2 / train).epsilon(1e-9));
}

TEST_CASE("a logged loss is the mean over the steps since the previous logged one", "[train][metrics]") {
    const std::string dir = temp_dir("loss_window");
    write_file(dir + "/tiny.json", kTinyCnn);
    write_file(dir + "/every.json", tiny_config(dir + "/tiny.json", dir + "/every"));
    write_file(dir + "/seven.json", tiny_config(dir + "/tiny.json", dir + "/seven"));
    auto r = run_command(binary() + " train --config " + dir + "/every.json");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    r = run_command(binary() + " train --config " + dir + "/seven.json --set train.log_every_steps=7");
    REQUIRE(r.exit_code == 0);
    // 60 steps per epoch, batch 8 throughout: logged at steps 7, 14, ..., 56 and at the epoch's end (60).
    const auto every = step_losses(dir + "/every/metrics.jsonl");
    const auto seven = step_losses(dir + "/seven/metrics.jsonl");
    REQUIRE(every.size() == 120);
    REQUIRE(seven.size() == 2 * 9);
    size_t k = 0;
    for (int epoch = 0; epoch < 2; ++epoch) {
        int64_t from = 0;
        for (int64_t to : {7, 14, 21, 28, 35, 42, 49, 56, 60}) {
            double sum = 0.0;
            for (int64_t s = from; s < to; ++s) sum += every[static_cast<size_t>(epoch * 60 + s)];
            INFO("epoch " << epoch + 1 << ", steps " << from + 1 << ".." << to);
            REQUIRE(seven[k++] == Approx(sum / static_cast<double>(to - from)).epsilon(1e-12));
            from = to;
        }
    }
}

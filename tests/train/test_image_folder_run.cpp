// data.format image_folder through the binary: folders written by `ringtrain make-image-folder`, a tiny CNN that
// learns them, the class list in summary.json and checkpoints (a resume or eval on other classes is refused), and
// data.skip_bad_files at 2 ranks (the same files skipped on both, reported once) and off (the first bad file stops
// the run naming it).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "fixtures.hpp"

using namespace rt_test;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

// conv8 -> pool -> conv16 -> pool -> global average -> one logit, on 3x16x16.
const char* kStripesCnn = R"({
  "name": "stripes_cnn", "input": [3, 16, 16],
  "layers": [
    {"type": "conv2d", "out_channels": 8, "kernel": 3, "padding": 1}, {"type": "relu"},
    {"type": "maxpool2d", "kernel": 2},
    {"type": "conv2d", "out_channels": 16, "kernel": 3, "padding": 1}, {"type": "relu"},
    {"type": "maxpool2d", "kernel": 2},
    {"type": "global_avgpool"},
    {"type": "linear", "out_features": 1}
  ],
  "loss": "sigmoid_bce"
})";

std::string folder_config(const std::string& dir, const std::string& extra_data = "") {
    return R"({"model": ")" + dir + R"(/cnn.json",
  "data": {"format": "image_folder", "train_dir": ")" + dir + R"(/train", "test_dir": ")" + dir + R"(/test",
           "image_size": [16, 16], "channels": 3, "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25],
           "augment": {"hflip": true, "random_crop_padding": 2}, "workers": 2)" + extra_data + R"(},
  "train": {"batch_size": 16, "epochs": 4, "seed": 3, "log_every_steps": 10},
  "optimizer": {"name": "adam", "lr": 0.01},
  "checkpoint": {"every_epochs": 1},
  "output": {"dir": ")" + dir + R"(/out", "progress": "none"}})";
}

// A 2-class folder pair (train: 2 x per_class, test: 2 x 40) made by the binary.
void make_folders(const std::string& dir, int per_class) {
    for (const auto& [split, n, seed] : {std::tuple{"train", per_class, 1}, std::tuple{"test", 40, 2}}) {
        const auto r = run_command(binary() + " make-image-folder --out " + dir + "/" + split + " --per-class " +
                                   std::to_string(n) + " --size 16x16 --format mixed --seed " + std::to_string(seed));
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
    }
    write_file(dir + "/cnn.json", kStripesCnn);
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f << bytes;
}

}  // namespace

TEST_CASE("a tiny CNN learns a generated 2-class image folder; the classes go into summary and checkpoints",
          "[train][image]") {
    const std::string dir = temp_dir("image_folder_run");
    make_folders(dir, 96);
    write_file(dir + "/c.json", folder_config(dir));
    auto r = run_command(binary() + " train --config " + dir + "/c.json");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto s = read_json(dir + "/out/summary.json");
    // Horizontal vs vertical stripes of random colours: 4 epochs of 12 steps reach >= 0.9 (measured 0.97-1.0).
    CHECK(s["test_accuracy"].get<double>() >= 0.9);
    CHECK(s["classes"] == nlohmann::json({"0_horizontal", "1_vertical"}));
    CHECK(s["data_prefetch"] == "on");  // decoding: the probe never turns prefetch off
    // The loader's wait is part of the data phase (on a CPU nearly all of it: nothing is staged for a device).
    const double loader_wait = s["data_loader_wait_s"].get<double>(), data_phase = s["phase_s"]["data"].get<double>();
    CHECK(loader_wait > 0);
    CHECK(loader_wait <= data_phase);
    CHECK_FALSE(s.contains("data_cache_mb"));

    // Resuming or evaluating with other class folders (the second one renamed) is refused, naming both lists.
    fs::rename(dir + "/train/1_vertical", dir + "/train/1_upright");
    fs::rename(dir + "/test/1_vertical", dir + "/test/1_upright");
    r = run_command(binary() + " train --config " + dir + "/c.json --set checkpoint.resume=auto --set train.epochs=5");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains("written by a run on the classes [\"0_horizontal\",\"1_vertical\"], this run's data "
                                  "has [\"0_horizontal\",\"1_upright\"]"));
    r = run_command(binary() + " eval --config " + dir + "/c.json --checkpoint " + dir +
                    "/out/checkpoints/ckpt-000000048.bin");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains("\"1_upright\""));
    // The same classes again: eval runs.
    fs::rename(dir + "/train/1_upright", dir + "/train/1_vertical");
    fs::rename(dir + "/test/1_upright", dir + "/test/1_vertical");
    r = run_command(binary() + " eval --config " + dir + "/c.json --checkpoint " + dir +
                    "/out/checkpoints/ckpt-000000048.bin");
    INFO(r.output);
    CHECK(r.exit_code == 0);
}

TEST_CASE("a class count the model cannot output is refused, naming both", "[train][image]") {
    const std::string dir = temp_dir("image_folder_classes");
    const auto r0 = run_command(binary() + " make-image-folder --out " + dir + "/train --classes 3 --per-class 4 --size 16x16");
    REQUIRE(r0.exit_code == 0);
    fs::copy(dir + "/train", dir + "/test", fs::copy_options::recursive);
    write_file(dir + "/cnn.json", kStripesCnn);
    write_file(dir + "/c.json", folder_config(dir));
    const auto r = run_command(binary() + " train --config " + dir + "/c.json --set train.batch_size=4");  // 12 images
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains("sigmoid_bce takes labels 0 and 1"));
    CHECK_THAT(r.output, Contains("labels up to 2"));
}

TEST_CASE("data.skip_bad_files: 2 ranks skip the same bad files, reported once; off, the first one stops the run",
          "[train][image][mpi]") {
    const std::string dir = temp_dir("image_folder_bad");
    make_folders(dir, 24);
    write_bytes(dir + "/train/0_horizontal/bad_empty.jpg", "");
    write_bytes(dir + "/train/1_vertical/bad_text.png", "this is not a PNG");
    write_bytes(dir + "/train/1_vertical/zz_truncated.jpg", "\xFF\xD8\xFF\xE0\x00\x10JFIF");
    write_bytes(dir + "/test/0_horizontal/bad.bmp", "BM");
    write_file(dir + "/c.json", folder_config(dir, R"(, "skip_bad_files": true)"));
    auto r = run_command(mpirun(2) + binary() + " train --config " + dir + "/c.json --set train.epochs=1");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const std::string line = "every rank skips 3 of 51 training and 1 of 81 test files that do not decode";
    CHECK_THAT(r.output, Contains(line));
    CHECK(r.output.find(line) == r.output.rfind(line));  // once, from rank 0
    const auto s = read_json(dir + "/out/summary.json");
    CHECK(s["skipped_files"] == nlohmann::json({dir + "/train/0_horizontal/bad_empty.jpg",
                                                dir + "/train/1_vertical/bad_text.png",
                                                dir + "/train/1_vertical/zz_truncated.jpg",
                                                dir + "/test/0_horizontal/bad.bmp"}));
    // 48 good training images, global batch 32: one step per epoch on both ranks (they agree, or the run hangs).
    CHECK(s["steps"] == 1);
    // With the cache on, the validation pass fills it: rank 0 holds at least the good files of its half of both
    // splits (over 48 of the 128 good images, 3x16x16 bytes each) and at most all of them; the summary says how much.
    r = run_command(mpirun(2) + binary() + " train --config " + dir + "/c.json --set train.epochs=1 --set data.cache=true "
                    "--set output.dir=" + dir + "/out_cache");
    REQUIRE(r.exit_code == 0);
    const double cache_mb = read_json(dir + "/out_cache/summary.json")["data_cache_mb"].get<double>();
    CHECK(cache_mb * 1048576.0 >= 48 * 3 * 16 * 16);
    CHECK(cache_mb * 1048576.0 <= 128 * 3 * 16 * 16);

    // Off: the first bad file a rank reads stops the job with exit 2 and its name.
    r = run_command(binary() + " train --config " + dir + "/c.json --set data.skip_bad_files=false --set output.dir=" +
                    dir + "/out2");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(dir + "/t"));  // a path of one of the bad files
}

TEST_CASE("an augmented image-folder run stopped at max_steps and resumed ends bit for bit where an uninterrupted one "
          "does, with other worker counts", "[train][image][checkpoint]") {
    // random_resized_crop + hflip on every training read: the draws come from (seed, epoch, index) only, so the
    // stopped and resumed runs (1, then 3 decoding workers) see the batches of the uninterrupted one (2 workers).
    const std::string dir = temp_dir("image_folder_resume");
    make_folders(dir, 24);
    const std::string padding = R"("augment": {"hflip": true, "random_crop_padding": 2})";
    std::string cfg = folder_config(dir);
    const size_t at = cfg.find(padding);
    REQUIRE(at != std::string::npos);
    cfg.replace(at, padding.size(), R"("augment": {"hflip": true, "random_resized_crop": [0.3, 1.0]})");
    write_file(dir + "/c.json", cfg);
    // 48 training images, batch 8: 6 steps an epoch, 12 in all; stop inside the second epoch.
    const std::string run = binary() + " train --config " + dir + "/c.json --set train.batch_size=8 --set train.epochs=2";
    auto r = run_command(run + " --set output.dir=" + dir + "/whole");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    r = run_command(run + " --set output.dir=" + dir + "/parts --set train.max_steps=8 --set data.workers=1");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(read_json(dir + "/parts/summary.json")["stopped_by_max_steps"] == true);
    r = run_command(run + " --set output.dir=" + dir + "/parts --set checkpoint.resume=auto --set data.workers=3");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto whole = read_json(dir + "/whole/summary.json"), parts = read_json(dir + "/parts/summary.json");
    CHECK(parts["steps"] == 12);
    CHECK(parts["resumed_from"].is_string());
    CHECK(parts["parameter_hash_per_rank"] == whole["parameter_hash_per_rank"]);
    CHECK(parts["test_loss"] == whole["test_loss"]);
    // The model's 6 parameter tensors (3 weights, 3 biases) in the final checkpoints, bit for bit.
    const std::string last = "/checkpoints/ckpt-000000012.bin";
    const std::vector<float> a = checkpoint_parameters(dir + "/whole" + last, 6);
    REQUIRE(a.size() > 1000);
    CHECK(checkpoint_parameters(dir + "/parts" + last, 6) == a);
    // Without the augmentation the parameters differ: the draws mattered.
    r = run_command(binary() + " train --config " + dir + "/c.json --set train.batch_size=8 --set train.epochs=2"
                    " --set data.augment.hflip=false --set output.dir=" + dir + "/plain");
    REQUIRE(r.exit_code == 0);
    CHECK(checkpoint_parameters(dir + "/plain" + last, 6) != a);
}

TEST_CASE("a bad test file found by the first evaluation keeps the epoch's checkpoint; fixed, the resumed run "
          "evaluates that epoch first and goes on", "[train][image][checkpoint]") {
    const std::string dir = temp_dir("image_folder_bad_test");
    make_folders(dir, 16);
    write_bytes(dir + "/test/1_vertical/zz_bad.png", "not a PNG");
    write_file(dir + "/c.json", folder_config(dir));
    // 32 training images, batch 16: 2 steps an epoch; the bad test file stops the run at the first evaluation.
    const std::string run = binary() + " train --config " + dir + "/c.json --set train.epochs=2";
    auto r = run_command(run);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(dir + "/test/1_vertical/zz_bad.png"));
    CHECK(fs::exists(dir + "/out/checkpoints/ckpt-000000002.bin"));  // the epoch's training is kept
    fs::remove(dir + "/test/1_vertical/zz_bad.png");
    r = run_command(run + " --set checkpoint.resume=auto");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto s = read_json(dir + "/out/summary.json");
    CHECK(s["resumed_from"].is_string());
    CHECK(s["steps"] == 4);
    CHECK(s["test_accuracy"].is_number());
    // Epoch 1 has its line (written by the resumed run, with the stopped run's training loss), once, before epoch 2's.
    std::vector<nlohmann::json> epochs;
    std::ifstream m(dir + "/out/metrics.jsonl");
    for (std::string line; std::getline(m, line);) {
        const auto j = nlohmann::json::parse(line);
        if (j["type"] == "epoch") epochs.push_back(j);
    }
    REQUIRE(epochs.size() == 2);
    CHECK(epochs[0]["epoch"] == 1);
    CHECK(epochs[0]["global_step"] == 2);
    CHECK(epochs[0]["train_loss"].is_number());
    CHECK(epochs[0]["test_accuracy"].is_number());
    CHECK(epochs[1]["epoch"] == 2);
}

TEST_CASE("data.skip_bad_files: a class whose every training file is bad is refused; eval never decodes the "
          "training split", "[train][image]") {
    const std::string dir = temp_dir("image_folder_bad_class");
    make_folders(dir, 8);
    write_file(dir + "/c.json", folder_config(dir, R"(, "skip_bad_files": true)"));
    auto r = run_command(binary() + " train --config " + dir + "/c.json --set train.epochs=1");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    // One bad training file: an evaluation reads only the training split's class names, so it is not reported.
    write_bytes(dir + "/train/0_horizontal/zz_bad.jpg", "not a JPEG");
    r = run_command(binary() + " eval --config " + dir + "/c.json --checkpoint " + dir +
                    "/out/checkpoints/ckpt-000000001.bin");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, !Contains("zz_bad.jpg"));
    // Every file of class 1_vertical bad: nothing would train its output; exit 2 naming the class folder.
    for (const auto& e : fs::directory_iterator(dir + "/train/1_vertical")) write_bytes(e.path().string(), "junk");
    r = run_command(binary() + " train --config " + dir + "/c.json --set train.epochs=1 --set output.dir=" + dir +
                    "/out2");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(dir + "/train/1_vertical: data.skip_bad_files skipped every training file"));
}

TEST_CASE("make-image-folder writes only into a new or empty folder", "[train][image][cli]") {
    const std::string dir = temp_dir("image_folder_out");
    const std::string make = binary() + " make-image-folder --per-class 2 --size 8x8 --out " + dir + "/f";
    auto r = run_command(make);
    REQUIRE(r.exit_code == 0);
    const auto before = fs::last_write_time(dir + "/f/0_horizontal/img_00000.jpg");
    r = run_command(make + " --format png --seed 7");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains("--out: '" + dir + "/f' exists and is not empty"));
    CHECK_FALSE(fs::exists(dir + "/f/0_horizontal/img_00000.png"));
    CHECK(fs::last_write_time(dir + "/f/0_horizontal/img_00000.jpg") == before);
    fs::create_directories(dir + "/empty");
    CHECK(run_command(binary() + " make-image-folder --per-class 1 --size 8x8 --out " + dir + "/empty").exit_code == 0);
}

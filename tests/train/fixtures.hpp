// Small models and configs on synthetic data, so trainer tests run in seconds.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "support/run_command.hpp"

namespace rt_test {

// conv -> relu -> pool -> dropout -> flatten -> linear -> relu -> dropout -> linear on 1x8x8 inputs.
inline const char* kTinyCnn = R"({
  "name": "tiny_cnn",
  "input": [1, 8, 8],
  "layers": [
    {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
    {"type": "relu"},
    {"type": "maxpool2d", "kernel": 2},
    {"type": "dropout", "p": 0.25},
    {"type": "flatten"},
    {"type": "linear", "out_features": 16},
    {"type": "relu"},
    {"type": "dropout", "p": 0.5},
    {"type": "linear", "out_features": 4}
  ]
})";

// The same without dropout (for exact equivalence of data-parallel and single-rank runs).
inline const char* kTinyCnnNoDropout = R"({
  "name": "tiny_cnn_nodrop",
  "input": [1, 8, 8],
  "layers": [
    {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
    {"type": "relu"},
    {"type": "maxpool2d", "kernel": 2},
    {"type": "flatten"},
    {"type": "linear", "out_features": 16},
    {"type": "relu"},
    {"type": "linear", "out_features": 4}
  ]
})";

// A config on synthetic 1x8x8 data with 4 classes; `extra` is spliced into the top-level object.
inline std::string tiny_config(const std::string& model_path, const std::string& out_dir, const std::string& extra = "") {
    return R"({"model": ")" + model_path + R"(",
  "data": {"format": "synthetic", "synthetic_shape": [1, 8, 8], "synthetic_classes": 4,
           "synthetic_train_size": 480, "synthetic_test_size": 96},
  "train": {"batch_size": 8, "epochs": 2, "seed": 7, "log_every_steps": 1},
  "output": {"dir": ")" + out_dir + R"(", "progress": "none"})" + extra + "}";
}

// conv -> bn2d -> relu -> avgpool -> flatten -> linear -> bn1d -> relu -> linear on 1x8x8, for synchronised BatchNorm
// through the binary (CPU and GPU); no bias before a batchnorm (its gradient is zero there). Parameters: conv.w, bn1
// w/b, fc1.w, bn2 w/b, fc2 w/b (8 tensors); then the two layers' running mean/var (4 buffers).
inline const char* const kSyncBnModel = R"({
  "name": "sync_bn",
  "layers": [
    {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1, "bias": false},
    {"type": "batchnorm2d"}, {"type": "relu"},
    {"type": "avgpool2d", "kernel": 2},
    {"type": "flatten"},
    {"type": "linear", "out_features": 8, "bias": false},
    {"type": "batchnorm1d", "momentum": 0.3}, {"type": "relu"},
    {"type": "linear", "out_features": 4}
  ]
})";
inline constexpr size_t kSyncBnTensors = 8 + 4;

// |a - b| / |a| over all values (2-norms).
// `ringtrain eval --config dir/c.json` of the checkpoint dir/out/checkpoints at global step `step`, one process: the
// JSON line it prints.
inline nlohmann::json eval_checkpoint_line(const std::string& dir, long long step) {
    char name[32];
    std::snprintf(name, sizeof name, "ckpt-%09lld.bin", step);
    const auto r = run_command(binary() + " eval --config " + dir + "/c.json --checkpoint " + dir +
                               "/out/checkpoints/" + name);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.output.substr(r.output.find('{')));
}

inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    REQUIRE(!a.empty());
    double d2 = 0, n2 = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        d2 += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        n2 += double(a[i]) * a[i];
    }
    return std::sqrt(d2 / n2);
}

}  // namespace rt_test

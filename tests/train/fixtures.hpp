// Small models and configs on synthetic data, so trainer tests run in seconds.
#pragma once

#include <string>

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

}  // namespace rt_test

// The sparse path's model file (models/sparse_*.json): one sparse_linear layer and a loss. Its feature count is not
// in the file: it comes from the data (data.num_features, the training file, or 2^data.hash_bits).
#pragma once

#include <cstdint>
#include <string>

#include "ringtrain/train/config.hpp"

namespace ringtrain::train::detail {

struct SparseModelFile {
    std::string model_name;    // the file's "name" (its stem when it has none)
    std::string name;          // the layer's name ("fc" unless the file names it)
    int64_t out_features = 1;  // K: 1 = binary (sigmoid_bce), K > 1 = K classes (softmax_cross_entropy)
    std::string loss;          // "sigmoid_bce" or "softmax_cross_entropy"
};

// Reads and checks `path`: exactly one layer, of type sparse_linear, out_features >= 1, and the loss that fits K.
// Throws InputError naming the file and JSON path.
SparseModelFile read_sparse_model_file(const std::string& path);

// Whether any layer of the model file at `path` is a sparse_linear layer (false when it cannot be read: the dense
// path's own reader then names the problem).
bool model_file_has_sparse_layer(const std::string& path);

}  // namespace ringtrain::train::detail

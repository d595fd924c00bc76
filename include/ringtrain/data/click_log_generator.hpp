// Click logs drawn from a KNOWN logistic model, so tests and demos can check that training recovers it.
// Rows: Criteo layout (13 integer columns, 26 categorical columns of Zipf-distributed values, missing fields) or
// libsvm (Zipf-distributed feature ids, values 1 / 0.5 / 0.25 / 2). Each row's label is drawn as
// Bernoulli(sigmoid(bias + w·x)) where x is EXACTLY what the reader will produce for that line: the generator
// parses its own line with the same parser (hash collisions, merged duplicates and all).
// True weights live on the parsed feature space (criteo: the 2^hash_bits hashed ids; libsvm: 0-based ids):
//   w_j = weight_scale * z_j, z_j = sqrt(-2 ln u1) cos(2 pi u2) (Box-Muller) with
//   u1 = ((a >> 11) + 0.5) / 2^53, u2 = (b >> 11) / 2^53, a = mix64(s + (2j+1)·G), b = mix64(s + (2j+2)·G),
//   s = mix64(model_seed ^ 0x77656967687473), G = 0x9E3779B97F4A7C15 (mix64: core/hash.hpp).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "ringtrain/data/sparse_reader.hpp"

namespace ringtrain::data {

struct ClickLogSpec {
    SparseFormat format = SparseFormat::Criteo;
    int64_t rows = 100000;
    uint64_t seed = 1;        // the rows (values, labels)
    uint64_t model_seed = 1;  // the true weights: files with different `seed` and the same model_seed share a model
    int hash_bits = 20;                                     // criteo: the feature space of the weights
    CriteoIntegers criteo_integers = CriteoIntegers::Log2;  // criteo: the transform the reader will use
    int64_t features = 1000;                                // libsvm: ids 1..features (1-based in the file)
    double bias = -1.5;
    double weight_scale = 0.25;
    double zipf_exponent = 1.2;  // P(value of rank k) ~ k^-s, for categorical values and libsvm ids
};

struct ClickLogTruth {
    ClickLogSpec spec;
    int64_t num_features = 0;
    int64_t positives = 0;
    double true_logloss = 0;           // the true model's mean log loss on the generated labels
    double expected_logloss = 0;       // its expectation: mean binary entropy of the true probabilities
    double constant_logloss = 0;       // the best constant predictor's (the positive rate's) log loss
    nlohmann::json to_json() const;    // with the weights' description
};

// The true weight of feature `feature` (see the formula above).
double click_log_true_weight(uint64_t model_seed, double weight_scale, uint64_t feature);

// Writes spec.rows rows to `path` (gzip when it ends in ".gz"). Throws InputError for a bad spec or an
// unwritable path.
ClickLogTruth generate_click_log(const ClickLogSpec& spec, const std::string& path);

}  // namespace ringtrain::data

// SyntheticDataset: deterministic random samples with a learnable label, for tests and benchmarks without
// data files (e.g. AlexNet on 224x224 "images"). Nothing is stored per sample: read(i) regenerates sample i
// from (seed, i), so any size costs O(sample) memory.
// `seed` fixes the task (the class patterns) and an endless stream of samples; the dataset is the window
// [first_index, first_index + size) of that stream, so a held-out split is the same seed with another window.
// Sample k of the stream has label c = hash(seed, k) mod num_classes and values
// separation * pattern[c] + noise * z_k, where pattern[c] is a fixed +-1 pattern per class and z_k is
// standard-normal noise. With separation ~ noise/2 a linear model separates the classes well once samples
// have more than a few dozen values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/data/dataset.hpp"

namespace ringtrain::data {

struct SyntheticOptions {
    Shape sample_shape{1, 28, 28};
    int64_t num_classes = 10;
    int64_t size = 1024;
    uint64_t seed = 0;
    float separation = 0.5f;  // amplitude of the class pattern
    float noise = 1.0f;       // standard deviation of the per-sample noise
    int64_t first_index = 0;  // where this dataset's window starts in the sample stream
};

class SyntheticDataset final : public Dataset {
public:
    explicit SyntheticDataset(SyntheticOptions options);
    SyntheticDataset(Shape sample_shape, int64_t num_classes, int64_t size, uint64_t seed)
        : SyntheticDataset(SyntheticOptions{std::move(sample_shape), num_classes, size, seed}) {}

    int64_t size() const override { return opt_.size; }
    Shape sample_shape() const override { return opt_.sample_shape; }
    int64_t num_classes() const override { return opt_.num_classes; }
    float read(int64_t index, float* x) const override;
    std::string description() const override;
    // Its samples follow from its options (seed, sizes), which the ranks compare as config keys: nothing more.
    uint64_t fingerprint() const override { return 0; }

    // The label of sample `index` (of this dataset) without generating it.
    int64_t label(int64_t index) const;

private:
    SyntheticOptions opt_;
    int64_t numel_ = 0;
    // Shifted windows into these tables give each class its pattern and each sample its noise, so read()
    // is a pass over two arrays instead of numel() random draws.
    std::vector<float> pattern_;  // +-1, numel_ + kWindow entries
    std::vector<float> noise_a_;  // standard normal, numel_ + kWindow entries; a sample's noise is the mean
    std::vector<float> noise_b_;  // of one window of each, scaled back to unit variance
};

}  // namespace ringtrain::data

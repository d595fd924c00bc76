// IdxDataset: an MNIST-style IDX image/label pair held in memory (private to the data layer).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/data/dataset.hpp"
#include "ringtrain/data/idx.hpp"

namespace ringtrain::data {

class IdxDataset final : public Dataset {
public:
    // images: {N, rows, cols}; labels: {N}. Both are checked by the caller.
    IdxDataset(std::string dir, Split split, std::string images_path, IdxArray images, IdxArray labels,
               const Normalization& norm);

    int64_t size() const override { return n_; }
    Shape sample_shape() const override { return {1, rows_, cols_}; }
    int64_t num_classes() const override { return num_classes_; }
    float read(int64_t index, float* x) const override;
    void will_read(int64_t index) const override;
    std::string description() const override;
    // The stored bytes (pixels and labels, CRC-32C), before normalisation: the same on any host for the same files.
    uint64_t fingerprint() const override;

private:
    std::string dir_;
    Split split_;
    std::string images_path_;
    int64_t n_ = 0, rows_ = 0, cols_ = 0, num_classes_ = 2;
    // Pixels stay as bytes (a quarter of the memory of floats), normalised as they are read.
    std::vector<uint8_t> pixels_;
    std::vector<uint8_t> labels_;
    float scale_ = 1.0f, offset_ = 0.0f;  // normalisation: x = byte * scale_ + offset_
};

}  // namespace ringtrain::data

#include "idx_dataset.hpp"

#include <algorithm>
#include <span>

#include "ringtrain/core/crc32c.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::data {

IdxDataset::IdxDataset(std::string dir, Split split, std::string images_path, IdxArray images, IdxArray labels,
                       const Normalization& norm)
    : dir_(std::move(dir)),
      split_(split),
      images_path_(std::move(images_path)),
      n_(images.dims.at(0)),
      rows_(images.dims.at(1)),
      cols_(images.dims.at(2)),
      pixels_(std::move(images.values)),
      labels_(std::move(labels.values)) {
    check(static_cast<int64_t>(labels_.size()) == n_ && static_cast<int64_t>(pixels_.size()) == n_ * rows_ * cols_,
          "IdxDataset: image and label arrays do not match");
    const int max_label = labels_.empty() ? 0 : *std::max_element(labels_.begin(), labels_.end());
    num_classes_ = std::max(2, max_label + 1);
    // x = (byte / 255 - mean) / std = byte * scale + offset
    scale_ = (norm.scale_to_unit ? 1.0f / 255.0f : 1.0f) / norm.stddev;
    offset_ = -norm.mean / norm.stddev;
}

float IdxDataset::read(int64_t index, float* x) const {
    // The message is built only on failure: this runs once per sample.
    if (index < 0 || index >= n_)
        throw Error("IdxDataset::read: index " + std::to_string(index) + " out of range [0, " + std::to_string(n_) + ")");
    const int64_t m = rows_ * cols_;
    const uint8_t* src = pixels_.data() + index * m;
    // An affine map of the byte (vectorises, unlike a table lookup); equal to the table to within a rounding.
    const float a = scale_, b = offset_;
    for (int64_t i = 0; i < m; ++i) x[i] = static_cast<float>(src[i]) * a + b;
    return static_cast<float>(labels_[index]);
}

void IdxDataset::will_read(int64_t index) const {
    if (index < 0 || index >= n_) return;
    const int64_t m = rows_ * cols_;
    const char* p = reinterpret_cast<const char*>(pixels_.data() + index * m);
    for (int64_t off = 0; off < m; off += 64) __builtin_prefetch(p + off, 0, 0);
}

std::string IdxDataset::description() const {
    return "IDX " + dir_ + " (" + (split_ == Split::Train ? "train" : "test") + " split, " + std::to_string(n_) +
           " samples of 1x" + std::to_string(rows_) + "x" + std::to_string(cols_) + ", " +
           std::to_string(num_classes_) + " classes, from " + images_path_ + ")";
}

uint64_t IdxDataset::fingerprint() const {
    const uint32_t pixels = crc32c(std::as_bytes(std::span<const uint8_t>(pixels_)));
    const uint32_t labels = crc32c(std::as_bytes(std::span<const uint8_t>(labels_)));
    return (static_cast<uint64_t>(pixels) << 32) | labels;
}

}  // namespace ringtrain::data

#include "ringtrain/data/synthetic.hpp"

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/core/rng.hpp"

namespace ringtrain::data {

namespace {

constexpr int64_t kWindow = 1 << 16;  // number of distinct offsets into the tables

// A hash of the pair (a, b): boost's hash_combine step, then mix64 so every bit of both reaches every output bit.
uint64_t mix(uint64_t a, uint64_t b) { return mix64(a ^ (b + kGoldenGamma + (a << 6) + (a >> 2))); }

}  // namespace

SyntheticDataset::SyntheticDataset(SyntheticOptions options) : opt_(std::move(options)) {
    if (opt_.sample_shape.empty()) throw InputError("synthetic data: sample shape must not be empty");
    for (int64_t d : opt_.sample_shape)
        if (d <= 0)
            throw InputError("synthetic data: sample shape " + shape_string(opt_.sample_shape) +
                             " has a non-positive dimension");
    if (opt_.num_classes < 2)
        throw InputError("synthetic data: num_classes must be at least 2 (got " + std::to_string(opt_.num_classes) +
                         ")");
    if (opt_.first_index < 0)
        throw InputError("synthetic data: first_index must be >= 0 (got " + std::to_string(opt_.first_index) + ")");
    if (opt_.size < 1)
        throw InputError("synthetic data: size must be at least 1 (got " + std::to_string(opt_.size) + ")");
    numel_ = shape_numel(opt_.sample_shape);
    Rng rng(mix(opt_.seed, 0x5157'4e54'4845'5449ULL));
    pattern_.resize(static_cast<size_t>(numel_ + kWindow));
    noise_a_.resize(static_cast<size_t>(numel_ + kWindow));
    noise_b_.resize(static_cast<size_t>(numel_ + kWindow));
    for (float& v : pattern_) v = (rng.next_u64() >> 63) ? 1.0f : -1.0f;
    for (float& v : noise_a_) v = rng.normal();
    for (float& v : noise_b_) v = rng.normal();
}

int64_t SyntheticDataset::label(int64_t index) const {
    const uint64_t k = static_cast<uint64_t>(opt_.first_index + index);
    return static_cast<int64_t>(mix(opt_.seed, 2 * k) % static_cast<uint64_t>(opt_.num_classes));
}

float SyntheticDataset::read(int64_t index, float* x) const {
    if (index < 0 || index >= opt_.size) throw Error("SyntheticDataset::read: index " + std::to_string(index) +
                                               " out of range [0, " + std::to_string(opt_.size) + ")");
    const int64_t c = label(index);
    // Odd multiplier: distinct classes (up to kWindow of them) get distinct windows of the pattern table.
    const uint64_t base = mix(opt_.seed, 0xc1a55ULL);
    const float* p = pattern_.data() + (base + static_cast<uint64_t>(c) * 0x9e37ULL) % kWindow;
    const uint64_t h = mix(opt_.seed, 2 * static_cast<uint64_t>(opt_.first_index + index) + 1);
    const float* za = noise_a_.data() + (h % kWindow);
    const float* zb = noise_b_.data() + ((h >> 32) % kWindow);
    const float a = opt_.separation, s = opt_.noise * 0.70710678f;
    for (int64_t j = 0; j < numel_; ++j) x[j] = a * p[j] + s * (za[j] + zb[j]);
    return static_cast<float>(c);
}

std::string SyntheticDataset::description() const {
    return "synthetic (" + std::to_string(opt_.size) + " samples of " + shape_string(opt_.sample_shape) + ", " +
           std::to_string(opt_.num_classes) + " classes, seed " + std::to_string(opt_.seed) +
           (opt_.first_index ? ", from stream index " + std::to_string(opt_.first_index) : std::string()) + ")";
}

}  // namespace ringtrain::data

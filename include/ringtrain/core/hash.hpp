// 64-bit mixing shared by the host and the device: the SplitMix64 generator and the counter-based hashes built on
// its output function. One definition, so that the CPU and CUDA dropout masks are bitwise the same by construction
// and every seed derivation mixes the same way. Header-only and constexpr: no state, nothing to link.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#if defined(__CUDACC__)
#define RINGTRAIN_HOST_DEVICE __host__ __device__
#else
#define RINGTRAIN_HOST_DEVICE
#endif

namespace ringtrain {

// SplitMix64's increment (2^64 / the golden ratio, odd).
inline constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

// SplitMix64's output function (Stafford's "Mix13" variant of the MurmurHash3 finaliser): a bijection of 64-bit
// words in which every input bit affects every output bit.
RINGTRAIN_HOST_DEVICE constexpr uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// The SplitMix64 generator (Steele, Lea, Flood 2014): advances `state` by the golden gamma and returns its mix.
RINGTRAIN_HOST_DEVICE constexpr uint64_t splitmix64_next(uint64_t& state) {
    state += kGoldenGamma;
    return mix64(state);
}

// Dropout's per-element draw: element `index` of a call seeded with `seed` gets the top 24 bits of the first
// SplitMix64 output from the state seed ^ index·0xD1B54A32D192ED03 (an odd constant that spreads consecutive
// indices over the word). Counter-based, so elements are independent and any thread can compute any element.
RINGTRAIN_HOST_DEVICE constexpr uint32_t dropout_bits24(uint64_t seed, uint64_t index) {
    uint64_t state = seed ^ (index * 0xD1B54A32D192ED03ull);
    return static_cast<uint32_t>(splitmix64_next(state) >> 40);
}

// The smallest 24-bit draw that keeps an element at drop probability p in [0, 1): ceil(p·2^24). Comparing
// bits >= threshold is exactly comparing the uniform bits·2^-24 >= p (both sides are exact in double).
RINGTRAIN_HOST_DEVICE constexpr uint32_t dropout_threshold(float p) {
    const double scaled = static_cast<double>(p) * 16777216.0;
    const auto whole = static_cast<uint32_t>(scaled);
    return static_cast<double>(whole) < scaled ? whole + 1 : whole;
}

// Whether element `index` survives dropout (see dropout_bits24 and dropout_threshold).
RINGTRAIN_HOST_DEVICE constexpr bool dropout_keeps(uint64_t seed, uint64_t index, uint32_t threshold) {
    return dropout_bits24(seed, index) >= threshold;
}

// The seed of rank `rank`'s dropout stream in a run seeded with `seed`: distinct per rank, so ranks drop different
// units, and reproducible across restarts.
RINGTRAIN_HOST_DEVICE constexpr uint64_t rank_dropout_seed(uint64_t seed, int rank) {
    return seed * kGoldenGamma + 0x5851F42D4C957F2Dull * static_cast<uint64_t>(rank + 1);
}

// FNV-1a (64-bit) over `bytes` bytes, continuing from `h`: the content hashes ranks compare (parameter layouts and
// values, the run plan's canonical form). Not cryptographic; cheap, byte-order defined, the same on every rank.
inline constexpr uint64_t kFnv1aOffsetBasis = 0xCBF29CE484222325ull;
inline uint64_t fnv1a(const void* bytes, size_t n, uint64_t h = kFnv1aOffsetBasis) {
    const auto* b = static_cast<const unsigned char*>(bytes);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

// A 64-bit hash as the 16 hex digits messages show.
inline std::string hex16(uint64_t v) {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
    return text;
}

}  // namespace ringtrain

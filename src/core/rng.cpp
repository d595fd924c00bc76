#include "ringtrain/core/rng.hpp"

#include <cmath>

#include "ringtrain/core/hash.hpp"

namespace ringtrain {

// The xoshiro authors' recommended seeding: the state words are consecutive SplitMix64 outputs.
void Rng::seed_with(uint64_t seed) {
    uint64_t x = seed;
    for (auto& w : s_) w = splitmix64_next(x);
}

float Rng::normal() {
    // u1 in (0, 1] so the log is finite.
    const double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    const double u2 = static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

uint64_t Rng::below(uint64_t n) {
    if (n == 0) return 0;
    // Rejection sampling removes modulo bias.
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = next_u64();
    while (x >= limit);
    return x % n;
}

}  // namespace ringtrain

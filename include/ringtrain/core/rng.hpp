// Seeded random numbers (xoshiro256**) with a state that fits in a checkpoint.
// Every random choice in ringtrain (init, dropout, shuffling) draws from an Rng with an explicit seed.
#pragma once

#include <array>
#include <cstdint>

namespace ringtrain {

class Rng {
public:
    explicit Rng(uint64_t seed = 0) { seed_with(seed); }
    void seed_with(uint64_t seed);

    // Inline: a handful of integer operations, which shuffling and weight initialisation call once per element.
    uint64_t next_u64() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }
    // Uniform in [0, 1), 24 bits of resolution.
    float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
    float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
    // Standard normal (Box-Muller, no cached second value so the state is just the four words).
    float normal();
    // Uniform integer in [0, n).
    uint64_t below(uint64_t n);

    using State = std::array<uint64_t, 4>;
    State state() const { return s_; }
    void set_state(const State& s) { s_ = s; }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    State s_{};
};

}  // namespace ringtrain

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

    uint64_t next_u64();
    // Uniform in [0, 1).
    float uniform();
    float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
    // Standard normal (Box-Muller, no cached second value so the state is just the four words).
    float normal();
    // Uniform integer in [0, n).
    uint64_t below(uint64_t n);

    using State = std::array<uint64_t, 4>;
    State state() const { return s_; }
    void set_state(const State& s) { s_ = s; }

private:
    State s_{};
};

}  // namespace ringtrain

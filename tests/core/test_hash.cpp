#include <catch2/catch.hpp>

#include <cmath>

#include "ringtrain/core/hash.hpp"
#include "ringtrain/core/rng.hpp"

using namespace ringtrain;

// Published SplitMix64 outputs (Rosetta Code, "Pseudo-random numbers/Splitmix64", seed 1234567; and seed 0).
constexpr uint64_t kSeed1234567[] = {6457827717110365317ull, 3203168211198807973ull, 9817491932198370423ull,
                                     4593380528125082431ull, 16408922859458223821ull};

TEST_CASE("splitmix64 matches the reference outputs", "[core][hash]") {
    uint64_t state = 1234567;
    for (uint64_t expect : kSeed1234567) REQUIRE(splitmix64_next(state) == expect);
    uint64_t zero = 0;
    REQUIRE(splitmix64_next(zero) == 0xE220A8397B1DCDAFull);
    REQUIRE(splitmix64_next(zero) == 0x6E789E6AA1B965F4ull);
    // constexpr, so device code and constant expressions get the same function.
    static_assert(mix64(0) == 0);
}

TEST_CASE("rng seeds xoshiro256** with consecutive splitmix64 outputs", "[core][hash]") {
    const Rng rng(1234567);
    const Rng::State s = rng.state();
    for (size_t i = 0; i < s.size(); ++i) REQUIRE(s[i] == kSeed1234567[i]);
}

TEST_CASE("dropout draws are splitmix64 of the seed and the spread index", "[core][hash]") {
    // Index 0 leaves the seed as it is: the first reference output, top 24 bits.
    REQUIRE(dropout_bits24(1234567, 0) == static_cast<uint32_t>(kSeed1234567[0] >> 40));
    for (uint64_t i : {1ull, 2ull, 1000ull, 1ull << 40}) {
        uint64_t state = 1234567 ^ (i * 0xD1B54A32D192ED03ull);
        REQUIRE(dropout_bits24(1234567, i) == static_cast<uint32_t>(splitmix64_next(state) >> 40));
    }
    REQUIRE(dropout_bits24(99, 7) != dropout_bits24(99, 8));
    REQUIRE(dropout_bits24(99, 7) != dropout_bits24(100, 7));
}

TEST_CASE("the integer dropout threshold decides as the uniform compared with p", "[core][hash]") {
    REQUIRE(dropout_threshold(0.0f) == 0u);
    REQUIRE(dropout_threshold(0.5f) == 1u << 23);
    for (float p : {1e-9f, 1e-7f, 0.1f, 0.3f, 0.5f, 0.7f, 0.999f, std::nextafter(0.5f, 1.0f)}) {
        const uint32_t t = dropout_threshold(p);
        CAPTURE(p, t);
        REQUIRE(static_cast<double>(t) == std::ceil(static_cast<double>(p) * 16777216.0));
        // Around the threshold, keeping by integers is keeping by the float uniform k·2^-24 >= p.
        for (uint32_t k = t > 2 ? t - 2 : 0; k <= t + 2; ++k) {
            const float u = static_cast<float>(k) * (1.0f / 16777216.0f);
            REQUIRE((k >= t) == (u >= p));
        }
    }
}

TEST_CASE("per-rank dropout seeds are distinct and fixed", "[core][hash]") {
    // Pinned: a change would silently change every run's dropout masks (and a resumed run's).
    REQUIRE(rank_dropout_seed(0, 0) == 0x5851F42D4C957F2Dull);
    REQUIRE(rank_dropout_seed(1, 1) == kGoldenGamma + 2 * 0x5851F42D4C957F2Dull);
    for (int a = 0; a < 8; ++a)
        for (int b = a + 1; b < 8; ++b) REQUIRE(rank_dropout_seed(42, a) != rank_dropout_seed(42, b));
}

TEST_CASE("fnv1a matches the published FNV-1a 64-bit test vectors and continues a running hash", "[core][hash]") {
    // Vectors from the FNV reference (Landon Curt Noll's test suite).
    REQUIRE(fnv1a("", 0) == 0xCBF29CE484222325ull);
    REQUIRE(fnv1a("a", 1) == 0xAF63DC4C8601EC8Cull);
    REQUIRE(fnv1a("foobar", 6) == 0x85944171F73967E8ull);
    // Hashing in pieces equals hashing at once (the parameter hashes feed tensors one by one).
    REQUIRE(fnv1a("bar", 3, fnv1a("foo", 3)) == fnv1a("foobar", 6));
}

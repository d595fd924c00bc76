#include <catch2/catch.hpp>

#include <cmath>

#include "ringtrain/core/rng.hpp"

using namespace ringtrain;

TEST_CASE("rng is reproducible from seed and from saved state", "[core]") {
    Rng a(42), b(42), c(43);
    REQUIRE(a.next_u64() == b.next_u64());
    REQUIRE(a.next_u64() != c.next_u64());
    Rng::State s = a.state();
    const uint64_t x = a.next_u64();
    a.set_state(s);
    REQUIRE(a.next_u64() == x);
}

TEST_CASE("rng distributions have the right moments", "[core]") {
    Rng r(7);
    const int n = 200000;
    double su = 0, sn = 0, sn2 = 0;
    for (int i = 0; i < n; ++i) {
        float u = r.uniform();
        REQUIRE(u >= 0.0f);
        REQUIRE(u < 1.0f);
        su += u;
        float z = r.normal();
        sn += z;
        sn2 += double(z) * z;
    }
    REQUIRE(su / n == Approx(0.5).margin(0.01));
    REQUIRE(sn / n == Approx(0.0).margin(0.01));
    REQUIRE(sn2 / n == Approx(1.0).margin(0.02));
    for (int i = 0; i < 1000; ++i) REQUIRE(r.below(7) < 7);
}

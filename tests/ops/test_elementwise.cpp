#include <catch2/catch.hpp>

#include <cmath>

#include "ops_test_util.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/ops/ops.hpp"

using namespace ringtrain;
using namespace ringtrain::ops;
using namespace ops_test;
using ops::Activation;

TEST_CASE("activation forward values", "[ops][activation]") {
    Tensor x({5}), y({5});
    const float xs[] = {-2.0f, -0.5f, 0.0f, 0.5f, 3.0f};
    std::copy(xs, xs + 5, x.data());
    ops::activation_forward(Activation::ReLU, x, y);
    for (int i = 0; i < 5; ++i) REQUIRE(y.data()[i] == std::max(xs[i], 0.0f));
    ops::activation_forward(Activation::Sigmoid, x, y);
    for (int i = 0; i < 5; ++i) REQUIRE(y.data()[i] == Approx(1.0 / (1.0 + std::exp(-xs[i]))).epsilon(1e-6));
    ops::activation_forward(Activation::Tanh, x, y);
    for (int i = 0; i < 5; ++i) REQUIRE(y.data()[i] == Approx(std::tanh(xs[i])).epsilon(1e-6).margin(1e-7));
    // Saturation stays finite.
    Tensor big({2}), out({2});
    big.data()[0] = -200.0f, big.data()[1] = 200.0f;
    ops::activation_forward(Activation::Sigmoid, big, out);
    REQUIRE(out.data()[0] == Approx(0.0).margin(1e-30));
    REQUIRE(out.data()[1] == 1.0f);
}

TEST_CASE("activation backward matches central finite differences", "[ops][activation][gradcheck]") {
    Rng rng(31);
    for (Activation a : {Activation::ReLU, Activation::Sigmoid, Activation::Tanh}) {
        CAPTURE(static_cast<int>(a));
        Tensor x = random_tensor({4, 7}, rng, -3.0f, 3.0f);
        for (float& v : x.span())
            if (std::fabs(v) < 0.1f) v += 0.3f;  // keep away from ReLU's kink
        const Tensor g = random_tensor(x.shape(), rng);  // L = <g, f(x)>
        Tensor y(x.shape()), dx(x.shape());
        ops::activation_forward(a, x, y);
        ops::activation_backward(a, y, g, dx);
        const float eps = 1e-2f;
        Tensor one({1}), f1({1});
        for (int64_t i = 0; i < x.numel(); ++i) {
            one.data()[0] = x.data()[i] + eps;
            ops::activation_forward(a, one, f1);
            const double fp = f1.data()[0];
            one.data()[0] = x.data()[i] - eps;
            ops::activation_forward(a, one, f1);
            const double fd = g.data()[i] * (fp - f1.data()[0]) / (2.0 * eps);
            CAPTURE(i, x.data()[i]);
            REQUIRE(dx.data()[i] == Approx(fd).epsilon(1e-3).margin(2e-4));
        }
        // dx may alias dy.
        Tensor dd = g.clone();
        ops::activation_backward(a, y, dd, dd);
        for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(dd.data()[i] == dx.data()[i]);
    }
}

TEST_CASE("dropout draws an inverted mask from the rng", "[ops][dropout]") {
    const int64_t n = 20000;
    Rng rng(32);
    const Tensor x = random_tensor({n}, rng);
    Tensor y({n}), mask({n});
    const float p = 0.3f;
    Rng r1(5);
    ops::dropout_forward(x, y, mask, p, r1);
    int64_t dropped = 0;
    // The mask is counter-based, as on the GPU: one draw seeds the call, element i keeps when the uniform made from
    // splitmix64(seed ^ i·0xD1B54A32D192ED03) is >= p (written here in float, the op compares integers; the CUDA op
    // uses the same function, so its mask is this one too). splitmix64_next is checked against the published reference
    // outputs in tests/core/test_hash.cpp.
    Rng replay(5);
    const uint64_t seed = replay.next_u64();
    REQUIRE(r1.next_u64() == replay.next_u64());  // the op drew exactly one number
    for (int64_t i = 0; i < n; ++i) {
        const float m = mask.data()[i];
        uint64_t state = seed ^ (static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull);
        const float u = static_cast<float>(splitmix64_next(state) >> 40) * (1.0f / 16777216.0f);
        const float expect = u >= p ? 1.0f / (1.0f - p) : 0.0f;
        REQUIRE(m == expect);
        REQUIRE(y.data()[i] == x.data()[i] * m);
        dropped += m == 0.0f;
    }
    REQUIRE(static_cast<double>(dropped) / n == Approx(p).margin(0.02));
    // The next call draws a new seed: a different mask, with the same rate.
    Tensor mask2({n});
    ops::dropout_forward(x, y, mask2, p, r1);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) differ += mask2.data()[i] != mask.data()[i];
    REQUIRE(static_cast<double>(differ) / n == Approx(2 * p * (1 - p)).margin(0.03));
    ops::dropout_forward(x, y, mask, p, r1);  // y and mask consistent again for the checks below

    // Backward applies the same mask; for fixed mask the op is linear, so FD is exact: dL/dx = g * mask.
    const Tensor g = random_tensor({n}, rng);
    Tensor dx({n});
    ops::dropout_backward(g, mask, dx);
    for (int64_t i = 0; i < n; ++i) REQUIRE(dx.data()[i] == g.data()[i] * mask.data()[i]);

    Rng r2(6);
    ops::dropout_forward(x, y, mask, 0.0f, r2);
    for (int64_t i = 0; i < n; ++i) {
        REQUIRE(mask.data()[i] == 1.0f);
        REQUIRE(y.data()[i] == x.data()[i]);
    }
    REQUIRE_THROWS_AS(ops::dropout_forward(x, y, mask, 1.0f, r2), InputError);
    REQUIRE_THROWS_AS(ops::dropout_forward(x, y, mask, -0.1f, r2), InputError);
}

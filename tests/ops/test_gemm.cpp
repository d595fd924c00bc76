#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "ops_test_util.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/ops/ops.hpp"

using namespace ringtrain;
using namespace ringtrain::ops;
using namespace ops_test;

namespace {
// Naive c = alpha op(a) op(b) + beta c in double.
std::vector<double> naive_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, double alpha,
                               double beta) {
    const int64_t M = c.dim(0), N = c.dim(1), K = ta ? a.dim(0) : a.dim(1);
    std::vector<double> out(M * N);
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            double s = 0.0;
            for (int64_t k = 0; k < K; ++k) {
                const double av = ta ? a.data()[k * a.dim(1) + i] : a.data()[i * a.dim(1) + k];
                const double bv = tb ? b.data()[j * b.dim(1) + k] : b.data()[k * b.dim(1) + j];
                s += av * bv;
            }
            out[i * N + j] = alpha * s + (beta == 0.0 ? 0.0 : beta * c.data()[i * N + j]);
        }
    return out;
}
}  // namespace

TEST_CASE("gemm matches a naive triple loop for all transposes, odd sizes, alpha and beta", "[ops][gemm]") {
    Rng rng(1);
    struct Size { int64_t m, n, k; };
    const Size sizes[] = {{7, 5, 3}, {17, 13, 11}, {1, 9, 4}, {33, 1, 20}, {65, 37, 129}, {3, 3, 1}};
    const float alphas[] = {1.0f, -0.75f};
    const float betas[] = {0.0f, 1.0f, 0.5f};
    for (const Size s : sizes)
        for (int t = 0; t < 4; ++t) {
            const bool ta = t & 1, tb = t & 2;
            const Tensor a = random_tensor(ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, rng);
            const Tensor b = random_tensor(tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, rng);
            for (float alpha : alphas)
                for (float beta : betas) {
                    CAPTURE(s.m, s.n, s.k, ta, tb, alpha, beta);
                    Tensor c = random_tensor({s.m, s.n}, rng);
                    // beta == 0 must not read c, even when it holds NaN.
                    if (beta == 0.0f) c.fill(std::numeric_limits<float>::quiet_NaN());
                    const auto expected = naive_gemm(a, ta, b, tb, c, alpha, beta);
                    ops::gemm(a, ta, b, tb, c, alpha, beta);
                    REQUIRE_CLOSE(c, expected, 1e-5, 1e-5);
                }
        }
}

TEST_CASE("gemm rejects inconsistent shapes", "[ops][gemm]") {
    Tensor a({3, 4}), b({5, 2}), c({3, 2});
    REQUIRE_THROWS_AS(ops::gemm(a, false, b, false, c), Error);
    Tensor b2({4, 2}), c2({2, 3});
    REQUIRE_THROWS_AS(ops::gemm(a, false, b2, false, c2), Error);
    Tensor v({4});
    REQUIRE_THROWS_AS(ops::gemm(a, false, v, false, c), Error);
    Tensor c3({3, 2});
    REQUIRE_NOTHROW(ops::gemm(a, false, b2, false, c3));
}

TEST_CASE("bias_add and bias_grad on [N,K] and [N,K,H,W]", "[ops][bias]") {
    Rng rng(2);
    for (const Shape& shape : {Shape{5, 3}, Shape{3, 4, 5, 7}}) {
        CAPTURE(shape_string(shape));
        const int64_t N = shape[0], K = shape[1], inner = shape_numel(shape) / (N * K);
        Tensor y = random_tensor(shape, rng);
        const Tensor bias = random_tensor({K}, rng);
        std::vector<double> expected = to_double(y);
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k)
                for (int64_t i = 0; i < inner; ++i) expected[(n * K + k) * inner + i] += bias.data()[k];
        ops::bias_add(y, bias);
        REQUIRE_CLOSE(y, expected, 1e-6, 1e-6);

        const Tensor dy = random_tensor(shape, rng);
        std::vector<double> db(K, 0.0);
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k)
                for (int64_t i = 0; i < inner; ++i) db[k] += dy.data()[(n * K + k) * inner + i];
        Tensor dbias = Tensor::filled({K}, 100.0f);
        ops::bias_grad(dy, dbias);
        REQUIRE_CLOSE(dbias, db, 1e-5, 1e-5);
        for (auto& v : db) v *= 2.0;
        ops::bias_grad(dy, dbias, /*accumulate=*/true);
        REQUIRE_CLOSE(dbias, db, 1e-5, 1e-5);
    }
    Tensor y({2, 3}), bad({4});
    REQUIRE_THROWS_AS(ops::bias_add(y, bad), Error);
}

TEST_CASE("bias_grad is the gradient of bias_add (finite differences)", "[ops][bias][gradcheck]") {
    Rng rng(3);
    const Shape shape{2, 3, 4, 5};
    const Tensor y0 = random_tensor(shape, rng);
    const Tensor wgt = random_tensor(shape, rng);  // L = sum(wgt * bias_add(y0, b))
    Tensor bias = random_tensor({3}, rng);
    auto loss = [&](const Tensor& b) {
        Tensor y = y0.clone();
        ops::bias_add(y, b);
        double s = 0.0;
        for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(wgt.data()[i]) * y.data()[i];
        return s;
    };
    Tensor db({3});
    ops::bias_grad(wgt, db);
    const float eps = 1e-2f;
    for (int64_t k = 0; k < 3; ++k) {
        Tensor bp = bias.clone(), bm = bias.clone();
        bp.data()[k] += eps;
        bm.data()[k] -= eps;
        const double fd = (loss(bp) - loss(bm)) / (2.0 * eps);
        REQUIRE(db.data()[k] == Approx(fd).epsilon(1e-3).margin(1e-3));
    }
}

TEST_CASE("scale, axpy, all_finite and sum_squares", "[ops][vector]") {
    Tensor x({3}), y({3});
    x.data()[0] = 1.0f, x.data()[1] = -2.0f, x.data()[2] = 3.0f;
    y.data()[0] = 0.5f, y.data()[1] = 0.25f, y.data()[2] = -1.0f;
    ops::axpy(2.0f, x, y);
    REQUIRE(y.data()[0] == 2.5f);
    REQUIRE(y.data()[1] == -3.75f);
    REQUIRE(y.data()[2] == 5.0f);
    ops::scale(x, -0.5f);
    REQUIRE(x.data()[0] == -0.5f);
    REQUIRE(x.data()[1] == 1.0f);
    REQUIRE(x.data()[2] == -1.5f);
    REQUIRE(ops::sum_squares(x) == Approx(0.25 + 1.0 + 2.25));
    Tensor z({3}), w({4});
    REQUIRE_THROWS_AS(ops::axpy(1.0f, z, w), Error);

    Tensor big = Tensor::filled({100003}, 1.5f);
    REQUIRE(ops::all_finite(big));
    REQUIRE(ops::sum_squares(big) == Approx(100003 * 2.25));
    big.data()[100002] = std::numeric_limits<float>::infinity();
    REQUIRE_FALSE(ops::all_finite(big));
    big.data()[100002] = 1.0f;
    big.data()[17] = std::numeric_limits<float>::quiet_NaN();
    REQUIRE_FALSE(ops::all_finite(big));
    big.data()[17] = -std::numeric_limits<float>::max();
    REQUIRE(ops::all_finite(big));
}

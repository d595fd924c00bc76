#include <catch2/catch.hpp>

#include <cmath>

#include "ops_test_util.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/ops/ops.hpp"

using namespace ringtrain;
using namespace ringtrain::ops;
using namespace ops_test;

namespace {
double naive_ce(const Tensor& z, const Tensor& labels) {
    const int64_t N = z.dim(0), K = z.dim(1);
    double total = 0.0;
    for (int64_t n = 0; n < N; ++n) {
        double s = 0.0;
        for (int64_t k = 0; k < K; ++k) s += std::exp(static_cast<double>(z.data()[n * K + k]));
        total += std::log(s) - z.data()[n * K + static_cast<int64_t>(labels.data()[n])];
    }
    return total;
}
}  // namespace

TEST_CASE("softmax cross-entropy forward: loss, probabilities and accuracy", "[ops][loss]") {
    Rng rng(41);
    const Tensor z = random_tensor({6, 5}, rng, -3.0f, 3.0f);
    Tensor labels({6});
    for (int n = 0; n < 6; ++n) labels.data()[n] = static_cast<float>((n * 3) % 5);
    Tensor probs(z.shape());
    const auto st = ops::softmax_cross_entropy_forward(z, labels, probs);
    REQUIRE(st.loss_sum == Approx(naive_ce(z, labels)).epsilon(1e-5));
    int64_t correct = 0;
    for (int64_t n = 0; n < 6; ++n) {
        double s = 0.0, zs = 0.0;
        int64_t arg = 0;
        for (int64_t k = 0; k < 5; ++k) {
            s += probs.data()[n * 5 + k];
            zs += std::exp(static_cast<double>(z.data()[n * 5 + k]));
            if (z.data()[n * 5 + k] > z.data()[n * 5 + arg]) arg = k;
        }
        REQUIRE(s == Approx(1.0).epsilon(1e-6));
        for (int64_t k = 0; k < 5; ++k)
            REQUIRE(probs.data()[n * 5 + k] == Approx(std::exp(static_cast<double>(z.data()[n * 5 + k])) / zs).epsilon(1e-5));
        correct += arg == static_cast<int64_t>(labels.data()[n]);
    }
    REQUIRE(st.correct == correct);
}

TEST_CASE("softmax cross-entropy is stable for logits of +-1000", "[ops][loss]") {
    Tensor z({2, 3}), labels({2}), probs({2, 3});
    const float zs[] = {1000.0f, -1000.0f, 0.0f, -1000.0f, 1000.0f, 999.0f};
    std::copy(zs, zs + 6, z.data());
    labels.data()[0] = 1.0f;  // loss 2000, wrong
    labels.data()[1] = 1.0f;  // loss log(1 + e^-1), right
    const auto st = ops::softmax_cross_entropy_forward(z, labels, probs);
    REQUIRE(std::isfinite(st.loss_sum));
    REQUIRE(st.loss_sum == Approx(2000.0 + std::log1p(std::exp(-1.0))).epsilon(1e-6));
    REQUIRE(st.correct == 1);
    REQUIRE(ops::all_finite(probs));
    REQUIRE(probs.data()[0] == 1.0f);
    REQUIRE(probs.data()[4] == Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(1e-6));
}

TEST_CASE("softmax cross-entropy backward matches finite differences", "[ops][loss][gradcheck]") {
    Rng rng(42);
    Tensor z = random_tensor({4, 6}, rng, -2.0f, 2.0f);
    Tensor labels({4});
    for (int n = 0; n < 4; ++n) labels.data()[n] = static_cast<float>(5 - n);
    Tensor probs(z.shape()), dz(z.shape());
    ops::softmax_cross_entropy_forward(z, labels, probs);
    const float scale = 0.25f;
    ops::softmax_cross_entropy_backward(probs, labels, dz, scale);
    const float eps = 1e-2f;
    Tensor tmp(z.shape());
    for (int64_t i = 0; i < z.numel(); ++i) {
        const float saved = z.data()[i];
        z.data()[i] = saved + eps;
        const double lp = ops::softmax_cross_entropy_forward(z, labels, tmp).loss_sum;
        z.data()[i] = saved - eps;
        const double lm = ops::softmax_cross_entropy_forward(z, labels, tmp).loss_sum;
        z.data()[i] = saved;
        REQUIRE(dz.data()[i] == Approx(scale * (lp - lm) / (2.0 * eps)).epsilon(2e-3).margin(2e-4));
    }
}

TEST_CASE("softmax cross-entropy rejects labels outside [0, K)", "[ops][loss]") {
    Tensor z = Tensor::zeros({2, 3}), labels({2}), probs({2, 3}), dz({2, 3});
    labels.data()[0] = 0.0f;
    for (float bad : {3.0f, -1.0f, 1.5f, NAN}) {
        labels.data()[1] = bad;
        REQUIRE_THROWS_AS(ops::softmax_cross_entropy_forward(z, labels, probs), InputError);
        REQUIRE_THROWS_AS(ops::softmax_cross_entropy_backward(probs, labels, dz, 1.0f), InputError);
    }
    Tensor short_labels({1});
    REQUIRE_THROWS_AS(ops::softmax_cross_entropy_forward(z, short_labels, probs), Error);
}

TEST_CASE("sigmoid BCE forward is stable and matches the naive formula", "[ops][loss]") {
    Tensor z({5, 1}), t({5}), p({5, 1});
    const float zs[] = {-1000.0f, 1000.0f, 0.7f, -0.3f, 100.0f};
    const float ts[] = {0.0f, 0.0f, 1.0f, 1.0f, 1.0f};
    std::copy(zs, zs + 5, z.data());
    std::copy(ts, ts + 5, t.data());
    const auto st = ops::sigmoid_bce_forward(z, t, p);
    auto naive = [](double x, double y) { return -(y * std::log(1.0 / (1.0 + std::exp(-x))) + (1 - y) * std::log(1.0 - 1.0 / (1.0 + std::exp(-x)))); };
    const double expected = 0.0 + 1000.0 + naive(0.7, 1.0) + naive(-0.3, 1.0) + 0.0;
    REQUIRE(std::isfinite(st.loss_sum));
    REQUIRE(st.loss_sum == Approx(expected).epsilon(1e-6));
    REQUIRE(st.correct == 3);  // samples 0, 2 and 4
    REQUIRE(p.data()[0] == Approx(0.0).margin(1e-30));
    REQUIRE(p.data()[1] == 1.0f);
    REQUIRE(p.data()[2] == Approx(1.0 / (1.0 + std::exp(-0.7))).epsilon(1e-6));
    t.data()[3] = 2.0f;
    REQUIRE_THROWS_AS(ops::sigmoid_bce_forward(z, t, p), InputError);
}

TEST_CASE("sigmoid BCE backward matches finite differences", "[ops][loss][gradcheck]") {
    Rng rng(43);
    Tensor z = random_tensor({7}, rng, -4.0f, 4.0f);
    Tensor t({7});
    for (int i = 0; i < 7; ++i) t.data()[i] = static_cast<float>(i % 2);
    Tensor p({7}), dz({7}), tmp({7});
    ops::sigmoid_bce_forward(z, t, p);
    const float scale = 0.5f;
    ops::sigmoid_bce_backward(p, t, dz, scale);
    const float eps = 1e-2f;
    for (int64_t i = 0; i < 7; ++i) {
        const float saved = z.data()[i];
        z.data()[i] = saved + eps;
        const double lp = ops::sigmoid_bce_forward(z, t, tmp).loss_sum;
        z.data()[i] = saved - eps;
        const double lm = ops::sigmoid_bce_forward(z, t, tmp).loss_sum;
        z.data()[i] = saved;
        REQUIRE(dz.data()[i] == Approx(scale * (lp - lm) / (2.0 * eps)).epsilon(2e-3).margin(2e-4));
    }
}

TEST_CASE("LossTotals adds the forwards it sees and starts again after take()", "[ops][loss]") {
    Rng rng(21);
    ops::LossTotals totals;
    REQUIRE_FALSE(totals.pending());
    const ops::LossStats empty = totals.take();
    REQUIRE(empty.loss_sum == 0.0);
    REQUIRE(empty.correct == 0);
    double want_sum = 0.0;
    int64_t want_correct = 0;
    for (int64_t n : {5, 1, 17}) {
        Tensor z = random_tensor({n, 4}, rng, -3.0f, 3.0f), labels({n}), probs({n, 4}), p2({n, 4});
        for (int64_t i = 0; i < n; ++i) labels.data()[i] = static_cast<float>(rng.below(4));
        const auto one = ops::softmax_cross_entropy_forward(z, labels, probs);
        want_sum += one.loss_sum;
        want_correct += one.correct;
        ops::softmax_cross_entropy_forward(z, labels, p2, totals);
        REQUIRE(totals.pending());
        REQUIRE_CLOSE(p2, to_double(probs), 1e-30, 0.0);  // exact
    }
    Tensor zb = random_tensor({9}, rng, -3.0f, 3.0f), tb({9}), pb({9});
    for (int64_t i = 0; i < 9; ++i) tb.data()[i] = static_cast<float>(i % 2);
    const auto bce = ops::sigmoid_bce_forward(zb, tb, pb);
    ops::sigmoid_bce_forward(zb, tb, pb, totals);
    const ops::LossStats got = totals.take();
    REQUIRE(got.loss_sum == Approx(want_sum + bce.loss_sum).epsilon(1e-12));
    REQUIRE(got.correct == want_correct + bce.correct);
    REQUIRE_FALSE(totals.pending());
    const ops::LossStats again = totals.take();
    REQUIRE(again.loss_sum == 0.0);
    REQUIRE(again.correct == 0);
    // On the CPU a bad label is reported by the forward itself, and nothing is added.
    Tensor z = Tensor::zeros({2, 3}), labels = Tensor::filled({2}, 3.0f), probs({2, 3});
    REQUIRE_THROWS_AS(ops::softmax_cross_entropy_forward(z, labels, probs, totals), InputError);
    REQUIRE_FALSE(totals.pending());
}

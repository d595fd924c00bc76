// Losses through the nn::Loss interface: values, accuracy counts and d(scale * sum loss)/dlogits by finite
// differences.
#include <catch2/catch.hpp>

#include <cmath>

#include "gradient_check.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/loss.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;

namespace {

// Finite-difference check of Loss::backward at (logits, labels) with the given scale.
gradcheck::Report check_loss(Loss& loss, Tensor& logits, const Tensor& labels, float scale) {
    gradcheck::Options o;
    o.eps = 1e-2;
    loss.forward(logits, labels);
    Tensor dlogits;
    loss.backward(labels, scale, dlogits);
    REQUIRE(dlogits.numel() == logits.numel());
    const Tensor analytic = dlogits.clone();
    const auto num = gradcheck::numeric_gradient(logits, o.eps, [&]() {
        return static_cast<double>(scale) * loss.forward(logits, labels).loss_sum;
    });
    gradcheck::Report r;
    for (int64_t i = 0; i < logits.numel(); ++i) gradcheck::compare(r, o, "dlogits", i, analytic.data()[i], num[i]);
    return r;
}

}  // namespace

TEST_CASE("make_loss knows both losses and rejects others", "[nn][loss]") {
    REQUIRE(make_loss("softmax_cross_entropy")->type() == "softmax_cross_entropy");
    REQUIRE(make_loss("sigmoid_bce")->type() == "sigmoid_bce");
    REQUIRE_THROWS_AS(make_loss("mse"), InputError);
}

TEST_CASE("softmax cross-entropy values and correct count", "[nn][loss]") {
    SoftmaxCrossEntropy ce;
    Tensor logits({2, 3});
    const float v[] = {0, 0, 0, 2, 1, 0};
    std::copy(v, v + 6, logits.data());
    Tensor labels({2});
    labels.data()[0] = 1;  // uniform row: loss log 3; argmax 0 (ties go anywhere, so not counted below)
    labels.data()[1] = 0;  // loss -2 + log(e^2 + e + 1); argmax 0 == label
    const auto s = ce.forward(logits, labels);
    const double row1 = -2.0 + std::log(std::exp(2.0) + std::exp(1.0) + 1.0);  // 0.40760596
    REQUIRE(s.loss_sum == Approx(std::log(3.0) + row1).epsilon(1e-5));
    // backward: (softmax - onehot) * scale; row 0 -> (1/3, 1/3 - 1, 1/3) * 0.5
    Tensor d;
    ce.backward(labels, 0.5f, d);
    REQUIRE(d.shape() == Shape{2, 3});
    REQUIRE(d.data()[0] == Approx(0.5 / 3));
    REQUIRE(d.data()[1] == Approx(0.5 * (1.0 / 3 - 1.0)));
    REQUIRE(d.data()[2] == Approx(0.5 / 3));

    labels.data()[0] = 2;
    logits.data()[2] = 5;  // row 0 now predicts class 2 = label
    REQUIRE(ce.forward(logits, labels).correct == 2);
    labels.data()[1] = 1;
    REQUIRE(ce.forward(logits, labels).correct == 1);
}

TEST_CASE("softmax cross-entropy rejects a label outside [0, K)", "[nn][loss]") {
    SoftmaxCrossEntropy ce;
    Tensor logits = Tensor::zeros({1, 3});
    Tensor labels = Tensor::filled({1}, 3.0f);
    REQUIRE_THROWS_AS(ce.forward(logits, labels), InputError);
}

TEST_CASE("softmax cross-entropy gradient by finite differences", "[nn][loss][gradcheck]") {
    SoftmaxCrossEntropy ce;
    Rng rng(41);
    Tensor logits = gradcheck::random_tensor({4, 5}, rng, -3.0f, 3.0f);
    Tensor labels({4});
    for (int i = 0; i < 4; ++i) labels.data()[i] = static_cast<float>(rng.below(5));
    SECTION("scale 1") { REQUIRE_GRADIENTS_OK(check_loss(ce, logits, labels, 1.0f)); }
    SECTION("scale 1/N") { REQUIRE_GRADIENTS_OK(check_loss(ce, logits, labels, 0.25f)); }
    SECTION("large logits stay finite") {
        for (float& v : logits.span()) v *= 30.0f;
        const auto s = ce.forward(logits, labels);
        REQUIRE(std::isfinite(s.loss_sum));
        REQUIRE_GRADIENTS_OK(check_loss(ce, logits, labels, 0.25f));
    }
}

TEST_CASE("sigmoid BCE values and correct count", "[nn][loss]") {
    SigmoidBinaryCrossEntropy bce;
    Tensor logits({3});
    logits.data()[0] = 2.0f, logits.data()[1] = 2.0f, logits.data()[2] = -100.0f;
    Tensor t({3});
    t.data()[0] = 1.0f, t.data()[1] = 0.0f, t.data()[2] = 1.0f;
    const auto s = bce.forward(logits, t);
    // log(1 + e^-2) + log(1 + e^2) + log(1 + e^100) ~= 0.126928 + 2.126928 + 100
    REQUIRE(s.loss_sum == Approx(std::log1p(std::exp(-2.0)) + std::log1p(std::exp(2.0)) + 100.0).epsilon(1e-5));
    REQUIRE(s.correct == 1);  // only sample 0 (p > 0.5, target 1)
    Tensor d;
    bce.backward(t, 2.0f, d);  // (sigmoid - t) * scale
    const double sg = 1.0 / (1.0 + std::exp(-2.0));
    REQUIRE(d.data()[0] == Approx(2.0 * (sg - 1.0)));
    REQUIRE(d.data()[1] == Approx(2.0 * sg));
    REQUIRE(d.data()[2] == Approx(-2.0).epsilon(1e-5));
}

TEST_CASE("sigmoid BCE gradient by finite differences", "[nn][loss][gradcheck]") {
    SigmoidBinaryCrossEntropy bce;
    Rng rng(42);
    Tensor t({6});
    for (int i = 0; i < 6; ++i) t.data()[i] = static_cast<float>(rng.below(2));
    SECTION("logits [N]") {
        Tensor logits = gradcheck::random_tensor({6}, rng, -4.0f, 4.0f);
        REQUIRE_GRADIENTS_OK(check_loss(bce, logits, t, 1.0f / 6));
    }
    SECTION("logits [N, 1]") {
        Tensor logits = gradcheck::random_tensor({6, 1}, rng, -4.0f, 4.0f);
        REQUIRE_GRADIENTS_OK(check_loss(bce, logits, t, 1.0f));
    }
}

TEST_CASE("loss gradient check notices a wrong scale", "[nn][loss][gradcheck]") {
    // Control for the checks above: a backward with scale 1 compared with a forward scaled by 2 must fail.
    SoftmaxCrossEntropy ce;
    Rng rng(43);
    Tensor logits = gradcheck::random_tensor({3, 4}, rng, -2.0f, 2.0f);
    Tensor labels({3});
    for (int i = 0; i < 3; ++i) labels.data()[i] = static_cast<float>(i);
    ce.forward(logits, labels);
    Tensor d;
    ce.backward(labels, 1.0f, d);
    const Tensor analytic = d.clone();
    gradcheck::Options o;
    const auto num = gradcheck::numeric_gradient(logits, o.eps, [&]() { return 2.0 * ce.forward(logits, labels).loss_sum; });
    gradcheck::Report r;
    for (int64_t i = 0; i < logits.numel(); ++i) gradcheck::compare(r, o, "d", i, analytic.data()[i], num[i]);
    REQUIRE(r.failed > 6);
}

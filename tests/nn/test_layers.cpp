// Finite-difference checks of every layer's backward pass, plus the checker's own power to fail.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "gradient_check.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;
using gradcheck::batched;

namespace {

// Builds `layer` on `sample` and checks it at input x.
gradcheck::Report check(Layer& layer, const Shape& sample, Tensor& x, const gradcheck::Options& o = {}) {
    gradcheck::build(layer, sample);
    REQUIRE(layer.output_shape(sample).size() > 0);
    return gradcheck::check_layer(layer, x, o);
}

gradcheck::Report check_random(Layer& layer, const Shape& sample, int64_t n, uint64_t seed = 11,
                               const gradcheck::Options& o = {}) {
    Rng rng(seed);
    Tensor x = gradcheck::random_tensor(batched(n, sample), rng);
    return check(layer, sample, x, o);
}

// Delegates to an inner layer and corrupts its backward pass: the checker must notice.
class Corrupted : public Layer {
public:
    using Corruption = std::function<void(Tensor* dx, std::vector<Parameter*>& params)>;
    Corrupted(std::unique_ptr<Layer> inner, Corruption c) : inner_(std::move(inner)), corrupt_(std::move(c)) {}
    std::string type() const override { return inner_->type(); }
    Shape output_shape(const Shape& in) const override { return inner_->output_shape(in); }
    void build(const Shape& in, Rng& rng) override { inner_->build(in, rng); }
    void forward(const Tensor& x, Tensor& y, const ForwardContext& c) override { inner_->forward(x, y, c); }
    void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, bool acc) override {
        inner_->backward(x, y, dy, dx, acc);
        auto ps = inner_->parameters();
        corrupt_(dx, ps);
    }
    std::vector<Parameter*> parameters() override { return inner_->parameters(); }

private:
    std::unique_ptr<Layer> inner_;
    Corruption corrupt_;
};

// A convolution whose backward pass uses different stride/padding than its forward pass (same output size).
class WrongStrideConv : public Layer {
public:
    WrongStrideConv(ops::Conv2dParams fwd, ops::Conv2dParams bwd) : fwd_(fwd), bwd_(bwd) {}
    std::string type() const override { return "conv2d"; }
    Shape output_shape(const Shape& in) const override {
        auto y = ops::conv2d_output_shape({1, in[0], in[1], in[2]}, {2, in[0], 3, 3}, fwd_);
        return {y[1], y[2], y[3]};
    }
    void build(const Shape& in, Rng& rng) override {
        w_ = {"w", gradcheck::random_tensor({2, in[0], 3, 3}, rng), Tensor::zeros({2, in[0], 3, 3})};
    }
    void forward(const Tensor& x, Tensor& y, const ForwardContext&) override {
        y.resize(ops::conv2d_output_shape(x.shape(), w_.value.shape(), fwd_));
        ops::conv2d_forward(x, w_.value, Tensor(), y, fwd_, ws_);
    }
    void backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx, bool acc) override {
        Tensor none;
        ops::conv2d_backward_filter(x, dy, w_.grad, none, bwd_, ws_, acc);
        dx->resize(x.shape());
        ops::conv2d_backward_data(dy, w_.value, *dx, bwd_, ws_);
    }
    std::vector<Parameter*> parameters() override { return {&w_}; }

private:
    ops::Conv2dParams fwd_, bwd_;
    Parameter w_;
    ops::Workspace ws_;
};

}  // namespace

// ---- the checker can fail --------------------------------------------------------------------------------

TEST_CASE("gradient checker catches a wrong sign in dx", "[nn][gradcheck]") {
    Corrupted layer(std::make_unique<Linear>(3), [](Tensor* dx, std::vector<Parameter*>&) {
        for (float& v : dx->span()) v = -v;
    });
    const auto r = check_random(layer, {4}, 2);
    REQUIRE(r.checked == 2 * 4 + 3 * 4 + 3);
    REQUIRE(r.failed >= 2 * 4 - 1);  // essentially every dx element (an exactly-zero one could pass)
}

TEST_CASE("gradient checker catches a missing bias gradient", "[nn][gradcheck]") {
    Corrupted layer(std::make_unique<Linear>(3), [](Tensor*, std::vector<Parameter*>& ps) {
        REQUIRE(ps.size() == 2);
        ps[1]->grad.zero();
    });
    const auto r = check_random(layer, {4}, 2);
    REQUIRE(r.failed == 3);  // exactly the three bias elements
}

TEST_CASE("gradient checker catches a wrong weight gradient scale", "[nn][gradcheck]") {
    // A factor of 1.05 (e.g. a forgotten 1/N or a dropout scale slightly off) is well outside rel_tol = 1e-2.
    Corrupted layer(std::make_unique<Conv2d>(2, 3, 3, ops::Conv2dParams{1, 1, 1, 1}),
                    [](Tensor*, std::vector<Parameter*>& ps) {
                        for (float& v : ps[0]->grad.span()) v *= 1.05f;
                    });
    const auto r = check_random(layer, {2, 4, 4}, 2);
    REQUIRE(r.failed > 30);  // most of the 36 weight elements
}

TEST_CASE("gradient checker catches a wrong stride in backward", "[nn][gradcheck]") {
    // forward: 5x5, k3, stride 2, pad 1 -> 3x3; backward pretends stride 3, pad 2 (also 3x3).
    WrongStrideConv bad({2, 2, 1, 1}, {3, 3, 2, 2});
    REQUIRE(bad.output_shape({1, 5, 5}) == Shape{2, 3, 3});
    const auto r = check_random(bad, {1, 5, 5}, 2);
    REQUIRE(r.failed > 10);

    WrongStrideConv good({2, 2, 1, 1}, {2, 2, 1, 1});  // the control: same class, consistent params
    REQUIRE_GRADIENTS_OK(check_random(good, {1, 5, 5}, 2));
}

TEST_CASE("gradient checker helpers keep inputs off kinks", "[nn][gradcheck]") {
    Rng rng(3);
    Tensor a = gradcheck::away_from_zero({1000}, rng, 0.02f);
    for (float v : a.span()) REQUIRE(std::fabs(v) >= 0.02f);
    Tensor d = gradcheck::distinct_values({2, 3, 4, 4}, rng, 0.05f);
    std::vector<float> s(d.span().begin(), d.span().end());
    std::sort(s.begin(), s.end());
    for (size_t i = 1; i < s.size(); ++i) REQUIRE(s[i] - s[i - 1] >= 0.0499f);
}

// ---- Linear -------------------------------------------------------------------------------------------

TEST_CASE("linear gradients with bias", "[nn][gradcheck][linear]") {
    Linear l(4);
    const auto r = check_random(l, {5}, 3);
    REQUIRE(r.checked == 3 * 5 + 4 * 5 + 4);
    REQUIRE_GRADIENTS_OK(r);
    REQUIRE(l.parameters().size() == 2);
    REQUIRE(l.parameters()[0]->name == "layer.weight");
    REQUIRE(l.parameters()[0]->value.shape() == Shape{4, 5});  // [out, in] as in PyTorch
    REQUIRE(l.parameters()[1]->name == "layer.bias");
}

TEST_CASE("linear gradients without bias", "[nn][gradcheck][linear]") {
    Linear l(3, false);
    const auto r = check_random(l, {6}, 2);
    REQUIRE(l.parameters().size() == 1);
    REQUIRE(r.checked == 2 * 6 + 3 * 6);
    REQUIRE_GRADIENTS_OK(r);
}

TEST_CASE("linear forward computes x W^T + b", "[nn][linear]") {
    Linear l(2);
    gradcheck::build(l, {3});
    auto ps = l.parameters();
    const float w[] = {1, 2, 3, -1, 0, 0.5f};
    std::copy(w, w + 6, ps[0]->value.data());
    ps[1]->value.data()[0] = 0.25f;
    ps[1]->value.data()[1] = -1.0f;
    Tensor x({1, 3});
    x.data()[0] = 1, x.data()[1] = -2, x.data()[2] = 4;
    Tensor y;
    l.forward(x, y, {false, nullptr});
    REQUIRE(y.shape() == Shape{1, 2});
    REQUIRE(y.data()[0] == Approx(1 - 4 + 12 + 0.25));  // 9.25
    REQUIRE(y.data()[1] == Approx(-1 + 0 + 2 - 1.0));   // 0
}

TEST_CASE("linear initialisation is uniform in +-1/sqrt(fan_in)", "[nn][linear]") {
    Linear l(50);
    gradcheck::build(l, {16});
    const float bound = 1.0f / 4.0f;
    float lo = 1, hi = -1;
    for (auto* p : l.parameters())
        for (float v : p->value.span()) lo = std::min(lo, v), hi = std::max(hi, v);
    REQUIRE(lo >= -bound);
    REQUIRE(hi <= bound);
    REQUIRE(lo < -0.9f * bound);  // 850 draws: the range is actually used
    REQUIRE(hi > 0.9f * bound);
}

TEST_CASE("linear rejects a non-flat input shape", "[nn][linear]") {
    Linear l(3);
    l.set_name("fc");
    REQUIRE_THROWS_AS(l.output_shape({2, 3}), InputError);
    REQUIRE(l.output_shape({7}) == Shape{3});
}

// ---- Conv2d -------------------------------------------------------------------------------------------

TEST_CASE("conv2d gradients", "[nn][gradcheck][conv]") {
    struct Case {
        const char* what;
        int64_t out, kh, kw;
        ops::Conv2dParams p;
        bool bias;
        Shape sample;
        Shape expect_out;
    };
    const Case cases[] = {
        {"1 channel, k3, stride 1, pad 0", 2, 3, 3, {1, 1, 0, 0}, true, {1, 5, 5}, {2, 3, 3}},
        {"3 channels, k3, stride 2, pad 1", 2, 3, 3, {2, 2, 1, 1}, true, {3, 6, 5}, {2, 3, 3}},
        {"2 channels, k2x3, stride 1, pad 2", 3, 2, 3, {1, 1, 2, 2}, true, {2, 4, 5}, {3, 7, 7}},
        {"2 channels, k3x2, stride (2,1), pad (0,1)", 2, 3, 2, {2, 1, 0, 1}, true, {2, 7, 4}, {2, 3, 5}},
        {"2 channels, k3, stride 2, no bias", 3, 3, 3, {2, 2, 0, 0}, false, {2, 7, 7}, {3, 3, 3}},
        {"3 channels, k5, stride 1, pad 2 (LeNet conv1)", 2, 5, 5, {1, 1, 2, 2}, true, {3, 6, 6}, {2, 6, 6}},
    };
    for (const auto& c : cases) {
        SECTION(c.what) {
            Conv2d conv(c.out, c.kh, c.kw, c.p, c.bias);
            conv.set_name("conv");
            REQUIRE(conv.output_shape(c.sample) == c.expect_out);
            const auto r = check_random(conv, c.sample, 2);
            REQUIRE(conv.parameters().size() == (c.bias ? 2u : 1u));
            REQUIRE(conv.parameters()[0]->value.shape() == Shape{c.out, c.sample[0], c.kh, c.kw});
            const int64_t expected = 2 * shape_numel(c.sample) + c.out * c.sample[0] * c.kh * c.kw + (c.bias ? c.out : 0);
            REQUIRE(r.checked == expected);
            REQUIRE_GRADIENTS_OK(r);
        }
    }
}

TEST_CASE("conv2d rejects a kernel larger than the padded input, naming the layer", "[nn][conv]") {
    Conv2d conv(4, 5, 5, ops::Conv2dParams{1, 1, 0, 0});
    conv.set_name("convX");
    try {
        (void)conv.output_shape({1, 4, 4});
        FAIL("no InputError");
    } catch (const InputError& e) {
        REQUIRE_THAT(e.what(), Catch::Contains("convX"));
    }
    REQUIRE(conv.output_shape({1, 5, 5}) == Shape{4, 1, 1});  // an exact fit is fine
}

// ---- MaxPool2d ---------------------------------------------------------------------------------------

TEST_CASE("maxpool2d gradients", "[nn][gradcheck][pool]") {
    gradcheck::Options o;
    SECTION("kernel 2, stride 2") {
        MaxPool2d pool(ops::Pool2dParams{2, 2, 2, 2, 0, 0});
        REQUIRE(pool.output_shape({2, 4, 6}) == Shape{2, 2, 3});
        Rng rng(5);
        Tensor x = gradcheck::distinct_values({2, 2, 4, 6}, rng, 5 * o.eps);
        const auto r = check(pool, {2, 4, 6}, x, o);
        REQUIRE(r.checked == 2 * 2 * 4 * 6);
        REQUIRE_GRADIENTS_OK(r);
    }
    SECTION("kernel 3, stride 2, padding 1 (overlapping windows)") {
        MaxPool2d pool(ops::Pool2dParams{3, 3, 2, 2, 1, 1});
        REQUIRE(pool.output_shape({2, 5, 5}) == Shape{2, 3, 3});
        Rng rng(6);
        Tensor x = gradcheck::distinct_values({2, 2, 5, 5}, rng, 5 * o.eps);
        const auto r = check(pool, {2, 5, 5}, x, o);
        REQUIRE(r.checked == 2 * 2 * 5 * 5);
        REQUIRE_GRADIENTS_OK(r);
    }
}

TEST_CASE("maxpool2d routes a tie to the first position and never to padding", "[nn][pool]") {
    MaxPool2d pool(ops::Pool2dParams{2, 2, 2, 2, 0, 0});
    Tensor x = Tensor::filled({1, 1, 2, 2}, -3.0f);  // all tied, all negative
    Tensor y, dx;
    pool.forward(x, y, {false, nullptr});
    REQUIRE(y.data()[0] == -3.0f);
    Tensor dy = Tensor::filled({1, 1, 1, 1}, 2.0f);
    pool.backward(x, y, dy, &dx, false);
    REQUIRE(dx.data()[0] == 2.0f);
    REQUIRE(dx.data()[1] == 0.0f);
    REQUIRE(dx.data()[2] == 0.0f);
    REQUIRE(dx.data()[3] == 0.0f);

    MaxPool2d padded(ops::Pool2dParams{3, 3, 2, 2, 1, 1});
    Tensor xn = Tensor::filled({1, 1, 3, 3}, -5.0f);  // padding (0) must not win over -5
    padded.forward(xn, y, {false, nullptr});
    REQUIRE(y.shape() == Shape{1, 1, 2, 2});
    for (float v : y.span()) REQUIRE(v == -5.0f);
}

// ---- activations ---------------------------------------------------------------------------------------

TEST_CASE("activation gradients", "[nn][gradcheck][activation]") {
    gradcheck::Options o;
    Rng rng(21);
    SECTION("relu") {
        ActivationLayer a(ops::Activation::ReLU);
        REQUIRE(a.type() == "relu");
        // Reject samples within 2 eps of the kink at 0.
        Tensor x = gradcheck::away_from_zero({3, 2, 3, 3}, rng, static_cast<float>(2 * o.eps));
        REQUIRE_GRADIENTS_OK(check(a, {2, 3, 3}, x, o));
    }
    SECTION("sigmoid") {
        ActivationLayer a(ops::Activation::Sigmoid);
        REQUIRE(a.type() == "sigmoid");
        Tensor x = gradcheck::random_tensor({3, 7}, rng, -3.0f, 3.0f);
        REQUIRE_GRADIENTS_OK(check(a, {7}, x, o));
    }
    SECTION("tanh") {
        ActivationLayer a(ops::Activation::Tanh);
        REQUIRE(a.type() == "tanh");
        Tensor x = gradcheck::random_tensor({3, 7}, rng, -2.0f, 2.0f);
        REQUIRE_GRADIENTS_OK(check(a, {7}, x, o));
    }
}

TEST_CASE("activation forward values", "[nn][activation]") {
    Tensor x({1, 3});
    x.data()[0] = -1.0f, x.data()[1] = 0.0f, x.data()[2] = 2.0f;
    Tensor y;
    ActivationLayer relu(ops::Activation::ReLU), sig(ops::Activation::Sigmoid), th(ops::Activation::Tanh);
    relu.forward(x, y, {false, nullptr});
    REQUIRE(y.data()[0] == 0.0f);
    REQUIRE(y.data()[1] == 0.0f);
    REQUIRE(y.data()[2] == 2.0f);
    sig.forward(x, y, {false, nullptr});
    REQUIRE(y.data()[0] == Approx(1.0 / (1.0 + std::exp(1.0))));
    REQUIRE(y.data()[1] == Approx(0.5));
    th.forward(x, y, {false, nullptr});
    REQUIRE(y.data()[2] == Approx(std::tanh(2.0)));
}

// ---- Dropout -------------------------------------------------------------------------------------------

TEST_CASE("dropout in training mode: backward uses the forward mask", "[nn][gradcheck][dropout]") {
    Dropout d(0.4f);
    gradcheck::Options o;
    o.training = true;  // every forward draws from Rng(o.ctx_seed): the same mask each time
    Rng rng(8);
    Tensor x = gradcheck::away_from_zero({4, 25}, rng, 0.05f);
    REQUIRE_GRADIENTS_OK(check(d, {25}, x, o));

    // Explicitly: y = x * m with m in {0, 1/(1-p)}, and dx = dy * m for the same m.
    Rng fwd(77);
    Tensor y, dx;
    d.forward(x, y, {true, &fwd});
    Rng dyr(78);
    Tensor dy = gradcheck::random_tensor(y.shape(), dyr);
    d.backward(x, y, dy, &dx, false);
    const float keep_scale = 1.0f / 0.6f;
    int dropped = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
        const float m = y.data()[i] / x.data()[i];
        if (y.data()[i] == 0.0f) {
            ++dropped;
            REQUIRE(dx.data()[i] == 0.0f);
        } else {
            REQUIRE(m == Approx(keep_scale));
            REQUIRE(dx.data()[i] == Approx(dy.data()[i] * keep_scale));
        }
    }
    // 100 draws at p = 0.4: 40 +- 4.9 expected; accept a generous band.
    REQUIRE(dropped > 20);
    REQUIRE(dropped < 60);

    // A different seed gives a different mask (the mask is random, not fixed).
    Rng other(1234567);
    Tensor y2;
    d.forward(x, y2, {true, &other});
    int differ = 0;
    for (int64_t i = 0; i < x.numel(); ++i) differ += (y.data()[i] == 0.0f) != (y2.data()[i] == 0.0f);
    REQUIRE(differ > 10);
}

TEST_CASE("dropout in eval mode is the identity", "[nn][dropout]") {
    Dropout d(0.5f);
    Rng rng(9);
    Tensor x = gradcheck::random_tensor({3, 10}, rng);
    Tensor y, dx;
    Rng fwd(1);
    d.forward(x, y, {false, &fwd});
    for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(y.data()[i] == x.data()[i]);
    Tensor dy = gradcheck::random_tensor(y.shape(), rng);
    d.backward(x, y, dy, &dx, false);
    for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(dx.data()[i] == dy.data()[i]);

    // Eval after a training forward: backward follows the latest forward (identity), not the stale mask.
    d.forward(x, y, {true, &fwd});
    d.forward(x, y, {false, nullptr});
    d.backward(x, y, dy, &dx, false);
    for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(dx.data()[i] == dy.data()[i]);

    gradcheck::Options o;  // eval mode FD check
    REQUIRE_GRADIENTS_OK(gradcheck::check_layer(d, x, o));
}

TEST_CASE("dropout rejects p outside [0, 1) and needs an Rng to train", "[nn][dropout]") {
    REQUIRE_THROWS_AS(Dropout(1.0f), InputError);
    REQUIRE_THROWS_AS(Dropout(-0.1f), InputError);
    Dropout d(0.5f);
    Tensor x = Tensor::filled({1, 4}, 1.0f), y;
    REQUIRE_THROWS_AS(d.forward(x, y, {true, nullptr}), Error);
}

// ---- Flatten ---------------------------------------------------------------------------------------------

TEST_CASE("flatten gradients and shape", "[nn][gradcheck][flatten]") {
    Flatten f;
    REQUIRE(f.output_shape({2, 3, 4}) == Shape{24});
    Rng rng(4);
    Tensor x = gradcheck::random_tensor({2, 2, 3, 4}, rng);
    Tensor y;
    f.forward(x, y, {false, nullptr});
    REQUIRE(y.shape() == Shape{2, 24});
    for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(y.data()[i] == x.data()[i]);
    REQUIRE_GRADIENTS_OK(check(f, {2, 3, 4}, x));
}

// ---- accumulate ----------------------------------------------------------------------------------------

TEST_CASE("backward with accumulate adds parameter gradients and still overwrites dx", "[nn][accumulate]") {
    auto run = [](Layer& layer, const Shape& sample) {
        gradcheck::build(layer, sample);
        Rng rng(31);
        Tensor x = gradcheck::random_tensor(batched(2, sample), rng);
        Tensor y, dx;
        layer.forward(x, y, {false, nullptr});
        Tensor dy = gradcheck::random_tensor(y.shape(), rng);
        layer.backward(x, y, dy, &dx, false);
        std::vector<Tensor> fresh;
        for (auto* p : layer.parameters()) fresh.push_back(p->grad.clone());
        const Tensor dx_fresh = dx.clone();

        // Put known junk in the gradients and in dx, then accumulate.
        std::vector<Tensor> before;
        for (auto* p : layer.parameters()) {
            for (float& v : p->grad.span()) v = rng.uniform(-1.0f, 1.0f);
            before.push_back(p->grad.clone());
        }
        dx.fill(123.0f);
        layer.backward(x, y, dy, &dx, true);
        auto ps = layer.parameters();
        REQUIRE(!ps.empty());
        for (size_t k = 0; k < ps.size(); ++k)
            for (int64_t i = 0; i < ps[k]->grad.numel(); ++i)
                REQUIRE(ps[k]->grad.data()[i] == Approx(before[k].data()[i] + fresh[k].data()[i]).margin(1e-6));
        for (int64_t i = 0; i < dx.numel(); ++i) REQUIRE(dx.data()[i] == Approx(dx_fresh.data()[i]).margin(1e-6));

        // And without accumulate the junk is overwritten.
        for (auto* p : layer.parameters()) p->grad.fill(50.0f);
        layer.backward(x, y, dy, &dx, false);
        for (size_t k = 0; k < ps.size(); ++k)
            for (int64_t i = 0; i < ps[k]->grad.numel(); ++i)
                REQUIRE(ps[k]->grad.data()[i] == Approx(fresh[k].data()[i]).margin(1e-6));
    };
    SECTION("linear") {
        Linear l(3);
        run(l, {4});
    }
    SECTION("linear without bias") {
        Linear l(3, false);
        run(l, {4});
    }
    SECTION("conv2d") {
        Conv2d c(2, 3, 3, ops::Conv2dParams{2, 2, 1, 1});
        run(c, {2, 5, 5});
    }
    SECTION("conv2d without bias") {
        Conv2d c(2, 2, 3, ops::Conv2dParams{1, 1, 0, 1}, false);
        run(c, {2, 4, 4});
    }
}

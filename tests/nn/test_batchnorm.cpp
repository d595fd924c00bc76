// BatchNorm1d/2d: gradient checks in training and evaluation mode, running statistics against a hand computation,
// evaluation with the running statistics, and the registry's keys.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "gradient_check.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layer_registry.hpp"
#include "ringtrain/nn/layers.hpp"
#include "ringtrain/nn/model.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;
using gradcheck::batched;

namespace {

// Non-trivial gamma/beta, so that their gradients and the scale path are exercised.
void randomise_affine(BatchNorm& bn, Rng& rng) {
    for (float& v : bn.parameters()[0]->value.span()) v = rng.uniform(0.5f, 1.5f);
    for (float& v : bn.parameters()[1]->value.span()) v = rng.uniform(-0.5f, 0.5f);
}

gradcheck::Report check_bn(BatchNorm& bn, const Shape& sample, int64_t n, bool training) {
    gradcheck::build(bn, sample, 7, "bn");
    Rng rng(21);
    randomise_affine(bn, rng);
    Tensor x = gradcheck::random_tensor(batched(n, sample), rng);
    gradcheck::Options o;
    o.training = training;
    o.eps = 5e-3;
    o.abs_tol = 2e-3;
    return gradcheck::check_layer(bn, x, o);
}

// Per-channel mean and biased variance of x viewed as [N, C, S], in double.
void channel_stats(const Tensor& x, int64_t c, double& mean, double& var) {
    const int64_t n = x.dim(0), C = x.dim(1), s = x.numel() / (n * C);
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < s; ++k) sum += x.data()[(i * C + c) * s + k];
    mean = sum / double(n * s);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < s; ++k) sq += std::pow(x.data()[(i * C + c) * s + k] - mean, 2);
    var = sq / double(n * s);
}

}  // namespace

TEST_CASE("batchnorm2d gradients in training mode (input, gamma, beta)", "[nn][gradcheck][batchnorm]") {
    BatchNorm bn(2, 0.1f, 1e-5f);
    REQUIRE_GRADIENTS_OK(check_bn(bn, {3, 3, 4}, 4, true));
}

TEST_CASE("batchnorm1d gradients in training mode, [C] and [C, L] samples", "[nn][gradcheck][batchnorm]") {
    BatchNorm flat(1, 0.1f, 1e-5f);
    REQUIRE_GRADIENTS_OK(check_bn(flat, {5}, 6, true));
    BatchNorm seq(1, 0.1f, 1e-5f);
    REQUIRE_GRADIENTS_OK(check_bn(seq, {3, 4}, 3, true));
}

TEST_CASE("batchnorm gradients in evaluation mode (running stats are constants)", "[nn][gradcheck][batchnorm]") {
    BatchNorm bn(2, 0.1f, 1e-5f);
    gradcheck::build(bn, {2, 3, 3}, 7, "bn");
    Rng rng(5);
    randomise_affine(bn, rng);
    for (float& v : bn.buffers()[0]->value.span()) v = rng.uniform(-0.3f, 0.3f);
    for (float& v : bn.buffers()[1]->value.span()) v = rng.uniform(0.5f, 2.0f);
    Tensor x = gradcheck::random_tensor({3, 2, 3, 3}, rng);
    gradcheck::Options o;
    o.training = false;
    REQUIRE_GRADIENTS_OK(gradcheck::check_layer(bn, x, o));
}

TEST_CASE("batchnorm training normalises with batch stats and updates running stats as PyTorch",
          "[nn][batchnorm]") {
    const float momentum = 0.25f, eps = 1e-5f;
    BatchNorm bn(2, momentum, eps);
    gradcheck::build(bn, {2, 2, 3}, 7, "bn");
    Rng rng(3);
    std::vector<double> rm{0.0, 0.0}, rv{1.0, 1.0};
    Tensor y;
    for (int step = 0; step < 3; ++step) {
        Tensor x = gradcheck::random_tensor({4, 2, 2, 3}, rng, -2.0f + step, 3.0f + step);
        Rng ctx_rng(1);
        bn.forward(x, y, ForwardContext{true, &ctx_rng});
        const int64_t m = 4 * 2 * 3;
        for (int64_t c = 0; c < 2; ++c) {
            double mean, var;
            channel_stats(x, c, mean, var);
            rm[c] = (1 - momentum) * rm[c] + momentum * mean;
            rv[c] = (1 - momentum) * rv[c] + momentum * var * m / (m - 1);  // unbiased for the running var
            // gamma 1, beta 0 at build: y is x standardised with the biased variance.
            double ym, yv;
            channel_stats(y, c, ym, yv);
            REQUIRE(std::fabs(ym) < 1e-5);
            REQUIRE(yv == Approx(var / (var + eps)).epsilon(1e-4));
        }
    }
    for (int64_t c = 0; c < 2; ++c) {
        REQUIRE(bn.buffers()[0]->value.data()[c] == Approx(rm[c]).epsilon(1e-5));
        REQUIRE(bn.buffers()[1]->value.data()[c] == Approx(rv[c]).epsilon(1e-5));
    }
    REQUIRE(bn.buffers()[0]->name == "bn.running_mean");
    REQUIRE(bn.buffers()[1]->name == "bn.running_var");
}

TEST_CASE("batchnorm evaluation uses the running stats and leaves them unchanged", "[nn][batchnorm]") {
    BatchNorm bn(1, 0.1f, 1e-3f);
    gradcheck::build(bn, {2}, 7, "bn");
    bn.parameters()[0]->value.data()[0] = 2.0f;   // gamma
    bn.parameters()[1]->value.data()[1] = -1.0f;  // beta
    bn.buffers()[0]->value.data()[0] = 0.5f;
    bn.buffers()[0]->value.data()[1] = -1.0f;
    bn.buffers()[1]->value.data()[0] = 4.0f;
    bn.buffers()[1]->value.data()[1] = 0.25f;
    Tensor x({3, 2});
    const float xs[] = {1.0f, 0.0f, -1.0f, 2.0f, 3.0f, -3.0f};
    std::copy(std::begin(xs), std::end(xs), x.data());
    Tensor y;
    bn.forward(x, y, ForwardContext{false, nullptr});
    for (int64_t i = 0; i < 3; ++i) {
        REQUIRE(y.data()[i * 2] == Approx(2.0 * (xs[i * 2] - 0.5) / std::sqrt(4.0 + 1e-3)));
        REQUIRE(y.data()[i * 2 + 1] == Approx((xs[i * 2 + 1] + 1.0) / std::sqrt(0.25 + 1e-3) - 1.0));
    }
    REQUIRE(bn.buffers()[0]->value.data()[0] == 0.5f);
    REQUIRE(bn.buffers()[1]->value.data()[1] == 0.25f);
    // Evaluation works for a single sample; training does not (one value per channel has no variance).
    Tensor one = x.slice_rows(0, 1);
    REQUIRE_NOTHROW(bn.forward(one, y, ForwardContext{false, nullptr}));
    Rng rng(1);
    REQUIRE_THROWS_AS(bn.forward(one, y, ForwardContext{true, &rng}), InputError);
}

TEST_CASE("batchnorm shapes, registry keys and model buffers", "[nn][batchnorm][registry]") {
    using nlohmann::json;
    const LayerRegistry& r = LayerRegistry::builtin();
    auto bn2 = r.make({{"type", "batchnorm2d"}, {"momentum", 0.05}, {"eps", 1e-3}}, "m.json: .layers[0]");
    REQUIRE(bn2->type() == "batchnorm2d");
    REQUIRE(dynamic_cast<BatchNorm&>(*bn2).momentum() == 0.05f);
    REQUIRE(dynamic_cast<BatchNorm&>(*bn2).eps() == 1e-3f);
    auto bn1 = r.make({{"type", "batchnorm1d"}}, "m.json: .layers[0]");
    REQUIRE(dynamic_cast<BatchNorm&>(*bn1).momentum() == 0.1f);
    REQUIRE(dynamic_cast<BatchNorm&>(*bn1).eps() == 1e-5f);
    REQUIRE_THROWS_AS(r.make({{"type", "batchnorm2d"}, {"momentum", 1.5}}, "w"), InputError);
    REQUIRE_THROWS_AS(r.make({{"type", "batchnorm2d"}, {"eps", 0}}, "w"), InputError);
    REQUIRE(bn2->output_shape({3, 4, 5}) == Shape{3, 4, 5});
    REQUIRE_THROWS_AS(bn2->output_shape({12}), InputError);
    REQUIRE_THROWS_AS(bn1->output_shape({3, 4, 5}), InputError);

    // A model lists gamma/beta as parameters and the running stats as buffers (never optimised).
    const json arch = {{"layers",
                        {{{"type", "conv2d"}, {"out_channels", 2}, {"kernel", 3}},
                         {{"type", "batchnorm2d"}, {"name", "bn"}},
                         {{"type", "flatten"}},
                         {{"type", "linear"}, {"out_features", 2}}}}};
    Rng rng(1);
    Model m(arch, {1, 5, 5}, rng);
    REQUIRE(m.buffers().size() == 2);
    REQUIRE(m.buffers()[0]->name == "bn.running_mean");
    int found = 0;
    for (const Parameter* p : m.parameters()) found += (p->name == "bn.weight" || p->name == "bn.bias");
    REQUIRE(found == 2);
    for (const Parameter* p : m.parameters()) REQUIRE(p->name.find("running") == std::string::npos);
}

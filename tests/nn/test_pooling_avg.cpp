// avgpool2d and global_avgpool: gradient checks, values (with padding in the divisor), shapes, registry.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "gradient_check.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layer_registry.hpp"
#include "ringtrain/nn/layers.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;
using gradcheck::batched;

namespace {
gradcheck::Report check_random(Layer& layer, const Shape& sample, int64_t n) {
    gradcheck::build(layer, sample);
    Rng rng(13);
    Tensor x = gradcheck::random_tensor(batched(n, sample), rng);
    return gradcheck::check_layer(layer, x);
}
}  // namespace

TEST_CASE("avgpool2d gradients: plain, overlapping with padding, rectangular", "[nn][gradcheck][pool]") {
    AvgPool2d plain(ops::Pool2dParams{2, 2, 2, 2, 0, 0});
    REQUIRE_GRADIENTS_OK(check_random(plain, {2, 4, 5}, 2));
    AvgPool2d overlap(ops::Pool2dParams{3, 3, 2, 2, 1, 1});
    REQUIRE_GRADIENTS_OK(check_random(overlap, {2, 5, 6}, 2));
    AvgPool2d rect(ops::Pool2dParams{2, 3, 1, 2, 1, 1});
    REQUIRE_GRADIENTS_OK(check_random(rect, {1, 4, 7}, 2));
}

TEST_CASE("avgpool2d values and the padded divisor", "[nn][pool]") {
    AvgPool2d pool(ops::Pool2dParams{2, 2, 2, 2, 0, 0});
    pool.set_name("p");
    Tensor x({1, 1, 2, 4});
    for (int i = 0; i < 8; ++i) x.data()[i] = float(i);  // rows 0 1 2 3 / 4 5 6 7
    Tensor y;
    pool.forward(x, y, ForwardContext{false, nullptr});
    REQUIRE(y.shape() == Shape{1, 1, 1, 2});
    REQUIRE(y.data()[0] == Approx((0 + 1 + 4 + 5) / 4.0));
    REQUIRE(y.data()[1] == Approx((2 + 3 + 6 + 7) / 4.0));

    // Padding counts in the divisor (PyTorch's count_include_pad=True): a corner window of ones holds one value.
    AvgPool2d padded(ops::Pool2dParams{2, 2, 1, 1, 1, 1});
    padded.set_name("q");
    Tensor ones = Tensor::filled({1, 1, 2, 2}, 1.0f);
    padded.forward(ones, y, ForwardContext{false, nullptr});
    REQUIRE(y.shape() == Shape{1, 1, 3, 3});
    REQUIRE(y.data()[0] == Approx(0.25));
    REQUIRE(y.data()[1] == Approx(0.5));
    REQUIRE(y.data()[4] == Approx(1.0));
}

TEST_CASE("global_avgpool gradients, values and shape", "[nn][gradcheck][pool]") {
    GlobalAvgPool gap;
    REQUIRE(gap.output_shape({3, 4, 5}) == Shape{3});
    REQUIRE_THROWS_AS(gap.output_shape({12}), InputError);
    REQUIRE_GRADIENTS_OK(check_random(gap, {3, 3, 4}, 2));
    Tensor x({1, 2, 1, 3});
    const float v[] = {1, 2, 6, -1, -2, 0};
    std::copy(std::begin(v), std::end(v), x.data());
    Tensor y;
    gap.forward(x, y, ForwardContext{false, nullptr});
    REQUIRE(y.shape() == Shape{1, 2});
    REQUIRE(y.data()[0] == Approx(3.0));
    REQUIRE(y.data()[1] == Approx(-1.0));
}

TEST_CASE("avgpool2d and global_avgpool in the registry", "[nn][pool][registry]") {
    const LayerRegistry& r = LayerRegistry::builtin();
    auto pool = r.make({{"type", "avgpool2d"}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}, "m.json: .layers[0]");
    REQUIRE(pool->type() == "avgpool2d");
    REQUIRE(pool->output_shape({4, 8, 8}) == Shape{4, 4, 4});
    // The stride defaults to the window, as maxpool2d.
    REQUIRE(r.make({{"type", "avgpool2d"}, {"kernel", 2}}, "w")->output_shape({1, 6, 6}) == Shape{1, 3, 3});
    REQUIRE_THROWS_AS(r.make({{"type", "avgpool2d"}, {"kernel", 2}}, "w")->output_shape({1, 1, 1}), InputError);
    REQUIRE_THROWS_AS(r.make({{"type", "avgpool2d"}}, "w"), InputError);  // kernel is required
    REQUIRE(r.make({{"type", "global_avgpool"}}, "w")->type() == "global_avgpool");
    REQUIRE_THROWS_AS(r.make({{"type", "global_avgpool"}, {"kernel", 2}}, "w"), InputError);
}

#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>

#include "ops_test_util.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/ops/ops.hpp"

using namespace ringtrain;
using namespace ringtrain::ops;
using namespace ops_test;

namespace {
// Naive max pooling: y and the flat index of the first max of each window (padding never wins).
void naive_pool(const Tensor& x, const Pool2dParams& p, const Shape& ys, std::vector<double>& y,
                std::vector<int64_t>& arg) {
    const int64_t NC = ys[0] * ys[1], H = x.dim(2), W = x.dim(3), P = ys[2], Q = ys[3];
    y.assign(NC * P * Q, 0.0);
    arg.assign(NC * P * Q, -1);
    for (int64_t nc = 0; nc < NC; ++nc)
        for (int64_t i = 0; i < P; ++i)
            for (int64_t j = 0; j < Q; ++j) {
                double best = -std::numeric_limits<double>::infinity();
                int64_t bi = -1;
                for (int64_t r = 0; r < p.kernel_h; ++r)
                    for (int64_t s = 0; s < p.kernel_w; ++s) {
                        const int64_t h = i * p.stride_h - p.pad_h + r, w = j * p.stride_w - p.pad_w + s;
                        if (h < 0 || w < 0 || h >= H || w >= W) continue;
                        const int64_t idx = (nc * H + h) * W + w;
                        if (bi < 0 || x.data()[idx] > best) best = x.data()[idx], bi = idx;
                    }
                y[(nc * P + i) * Q + j] = best;
                arg[(nc * P + i) * Q + j] = bi;
            }
}
}  // namespace

TEST_CASE("maxpool2d forward and backward match a naive implementation", "[ops][pool]") {
    Rng rng(21);
    struct Case {
        Shape x;
        Pool2dParams p;
    };
    const Case cases[] = {
        {{2, 3, 8, 8}, {2, 2, 2, 2, 0, 0}},   // the common 2x2/2 fast path
        {{1, 2, 7, 9}, {2, 2, 2, 2, 0, 0}},   // odd sizes drop the last row/column
        {{2, 3, 6, 34}, {2, 2, 2, 2, 0, 0}},  // fast path, 17 outputs a row: two vectors of 8 (AVX2) and a tail
        {{1, 2, 5, 33}, {2, 2, 2, 2, 0, 0}},  // ... with an odd last row and column
        {{2, 2, 9, 7}, {3, 3, 2, 2, 1, 1}},   // overlapping windows with padding
        {{1, 3, 6, 5}, {3, 2, 1, 2, 1, 0}},   // stride != kernel, non-square
        {{3, 1, 5, 5}, {2, 2, 1, 1, 0, 0}},   // overlapping stride 1
        {{1, 1, 4, 6}, {4, 3, 3, 2, 2, 1}},   // stride > kernel in h, pad 2
    };
    for (const Case& c : cases) {
        CAPTURE(shape_string(c.x), c.p.kernel_h, c.p.kernel_w, c.p.stride_h, c.p.stride_w, c.p.pad_h, c.p.pad_w);
        // Quantised values so windows contain ties; all negative half the time so padding (0) would win if used.
        Tensor x(c.x);
        for (float& v : x.span()) v = static_cast<float>(static_cast<int>(rng.below(5))) - 6.0f * (rng.uniform() < 0.5f);
        const Shape ys = ops::pool2d_output_shape(x.shape(), c.p);
        std::vector<double> y_ref;
        std::vector<int64_t> arg;
        naive_pool(x, c.p, ys, y_ref, arg);
        Tensor y = Tensor::filled(ys, 1e30f);
        ops::maxpool2d_forward(x, y, c.p);
        REQUIRE_CLOSE(y, y_ref, 1e-12, 0.0);

        const Tensor dy = random_tensor(ys, rng);
        std::vector<double> dx_ref(x.numel(), 0.0);
        for (size_t i = 0; i < arg.size(); ++i) dx_ref[arg[i]] += dy.data()[i];
        Tensor dx = Tensor::filled(x.shape(), 1e30f);
        ops::maxpool2d_backward(x, y, dy, dx, c.p);
        REQUIRE_CLOSE(dx, dx_ref, 1e-6, 1e-6);
    }
}

TEST_CASE("maxpool2d routes the gradient to the first maximum and ignores padding", "[ops][pool]") {
    Tensor x({1, 1, 2, 2});
    for (float& v : x.span()) v = -3.0f;  // all tied and negative
    const Pool2dParams p{2, 2, 2, 2, 1, 1};  // padded to 4x4: four windows of one real element each... and padding
    const Shape ys = ops::pool2d_output_shape(x.shape(), p);
    REQUIRE(ys == Shape{1, 1, 2, 2});
    Tensor y(ys), dy = Tensor::filled(ys, 1.0f), dx(x.shape());
    ops::maxpool2d_forward(x, y, p);
    for (float v : y.span()) REQUIRE(v == -3.0f);  // never the zero padding
    ops::maxpool2d_backward(x, y, dy, dx, p);
    for (float v : dx.span()) REQUIRE(v == 1.0f);

    Tensor t({1, 1, 2, 2});
    for (float& v : t.span()) v = 5.0f;
    const Pool2dParams q{2, 2, 2, 2, 0, 0};
    Tensor ty({1, 1, 1, 1}), tdy = Tensor::filled({1, 1, 1, 1}, 2.0f), tdx({1, 1, 2, 2});
    ops::maxpool2d_forward(t, ty, q);
    ops::maxpool2d_backward(t, ty, tdy, tdx, q);
    REQUIRE(tdx.data()[0] == 2.0f);
    REQUIRE(tdx.data()[1] == 0.0f);
    REQUIRE(tdx.data()[2] == 0.0f);
    REQUIRE(tdx.data()[3] == 0.0f);
}

TEST_CASE("pool2d shape errors", "[ops][pool]") {
    REQUIRE_THROWS_AS(ops::pool2d_output_shape({1, 1, 2, 2}, {3, 3, 1, 1, 0, 0}), InputError);
    REQUIRE_THROWS_AS(ops::pool2d_output_shape({1, 1, 8, 8}, {2, 2, 2, 2, 2, 0}), InputError);  // pad > kernel/2
    REQUIRE_THROWS_AS(ops::pool2d_output_shape({1, 8, 8}, {}), Error);
    Tensor x({1, 1, 4, 4}), y({1, 1, 3, 3});
    REQUIRE_THROWS_AS(ops::maxpool2d_forward(x, y, {}), Error);
}

TEST_CASE("maxpool2d backward with the preceding ReLU's backward fused equals the two in sequence", "[ops][pool][fusion]") {
    Rng rng(22);
    const std::pair<Shape, Pool2dParams> cases[] = {
        {{2, 3, 8, 8}, {2, 2, 2, 2, 0, 0}},  // the 2x2/2 fast path
        {{1, 2, 7, 9}, {2, 2, 2, 2, 0, 0}},  // fast path, odd edges
        {{2, 2, 7, 35}, {2, 2, 2, 2, 0, 0}}, // fast path, two vectors of 8 windows a row and a tail
        {{2, 2, 9, 7}, {3, 3, 2, 2, 1, 1}},  // overlapping windows with padding
        {{3, 1, 5, 5}, {2, 2, 1, 1, 0, 0}},  // overlapping stride 1: one position gets several windows' gradient
    };
    for (const auto& [shape, p] : cases) {
        CAPTURE(shape_string(shape), p.kernel_h, p.stride_h, p.pad_h);
        // A ReLU's output with many ties: quantised, about half exactly 0 (whole windows of zeros too).
        Tensor x(shape);
        for (float& v : x.span()) v = std::max(0.0f, static_cast<float>(static_cast<int>(rng.below(5))) - 2.0f);
        const Shape ys = ops::pool2d_output_shape(x.shape(), p);
        Tensor y(ys);
        ops::maxpool2d_forward(x, y, p);
        const Tensor dy = random_tensor(ys, rng);
        Tensor ref(x.shape()), got = Tensor::filled(x.shape(), 1e30f);
        ops::maxpool2d_backward(x, y, dy, ref, p);
        ops::activation_backward(Activation::ReLU, x, ref, ref);
        ops::maxpool2d_backward_relu(x, y, dy, got, p);
        for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(got.data()[i] == ref.data()[i]);
        // The fusion matters: some windows' maximum is 0, whose gradient the ReLU stops.
        Tensor plain(x.shape());
        ops::maxpool2d_backward(x, y, dy, plain, p);
        bool differs = false;
        for (int64_t i = 0; i < x.numel(); ++i) differs |= plain.data()[i] != got.data()[i];
        REQUIRE(differs);
    }
}

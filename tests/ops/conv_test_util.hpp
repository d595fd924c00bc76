// Shared by the convolution tests (im2col and oneDNN paths): a case's shapes, its params, and the finite-difference
// gradient check of conv2d's backward against its forward.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>

#include "ops_test_util.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/ops/ops.hpp"
#include "ringtrain/ops/workspace.hpp"

namespace conv_test {

// x [N, C, H, W], w [K, C, R, S], stride sh x sw, padding ph x pw.
struct Case {
    int64_t N, C, H, W, K, R, S, sh, sw, ph, pw;
};

inline ringtrain::ops::Conv2dParams params(const Case& c) { return {c.sh, c.sw, c.ph, c.pw}; }

inline double dot(const ringtrain::Tensor& a, const ringtrain::Tensor& b) {
    double s = 0.0;
    for (int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a.data()[i]) * b.data()[i];
    return s;
}

// With L = <g, conv(x, w) + b> for a random g, every third element of dx, dw and db from the backward ops must
// equal L's central difference (eps 1e-2), on whatever CPU path is set.
inline void check_conv_gradients(const Case& c, ringtrain::Rng& rng, ringtrain::ops::Workspace& ws) {
    using ringtrain::Shape;
    using ringtrain::Tensor;
    namespace ops = ringtrain::ops;
    const ringtrain::ops::Conv2dParams p = params(c);
    using ops_test::random_tensor;
    Tensor x = random_tensor({c.N, c.C, c.H, c.W}, rng);
    Tensor w = random_tensor({c.K, c.C, c.R, c.S}, rng);
    Tensor b = random_tensor({c.K}, rng);
    const Shape ys = ops::conv2d_output_shape(x.shape(), w.shape(), p);
    const Tensor g = random_tensor(ys, rng);
    auto loss = [&] {
        Tensor y(ys);
        ops::conv2d_forward(x, w, b, y, p, ws);
        return dot(y, g);
    };
    Tensor dx(x.shape()), dw(w.shape()), db({c.K});
    ops::conv2d_backward_data(g, w, dx, p, ws);
    ops::conv2d_backward_filter(x, g, dw, db, p, ws);
    const float eps = 1e-2f;
    auto check = [&](Tensor& t, const Tensor& grad) {
        for (int64_t i = 0; i < t.numel(); i += 3) {
            const float saved = t.data()[i];
            t.data()[i] = saved + eps;
            const double lp = loss();
            t.data()[i] = saved - eps;
            const double lm = loss();
            t.data()[i] = saved;
            CAPTURE(c.N, c.C, i);
            REQUIRE(grad.data()[i] == Approx((lp - lm) / (2.0 * eps)).epsilon(2e-3).margin(2e-3));
        }
    };
    check(x, dx);
    check(w, dw);
    check(b, db);
}

}  // namespace conv_test

namespace conv_test {

// A ReLU's output: random values with about half of them exactly 0 (ties and the mask's edge).
inline ringtrain::Tensor relu_output(const ringtrain::Shape& s, ringtrain::Rng& rng) {
    ringtrain::Tensor t = ops_test::random_tensor(s, rng);
    for (float& v : t.span()) v = v > 0.0f ? v : 0.0f;
    return t;
}

// Elementwise equal (so -0 == 0) and the same size: the fused ops must give the unfused ops' values exactly.
inline bool same_values(const ringtrain::Tensor& a, const ringtrain::Tensor& b) {
    if (a.shape() != b.shape()) return false;
    for (int64_t i = 0; i < a.numel(); ++i)
        if (!(a.data()[i] == b.data()[i])) return false;
    return true;
}

// conv2d_forward_relu against conv2d_forward + activation_forward(ReLU), and conv2d_backward_data_relu against
// conv2d_backward_data + activation_backward(ReLU) with the input x as the ReLU's output, on the path in force.
// Forward within 1e-6 (oneDNN's post-op kernel may round its sums differently); the backward mask exactly.
inline void check_relu_fusion(const Case& c, bool bias, ringtrain::Rng& rng, ringtrain::ops::Workspace& ws) {
    using ringtrain::Tensor;
    namespace ops = ringtrain::ops;
    CAPTURE(c.N, c.C, c.H, c.W, c.K, c.R, c.S, c.sh, c.sw, c.ph, c.pw, bias);
    const ops::Conv2dParams p = params(c);
    const Tensor x = relu_output({c.N, c.C, c.H, c.W}, rng);
    const Tensor w = ops_test::random_tensor({c.K, c.C, c.R, c.S}, rng);
    const Tensor b = bias ? ops_test::random_tensor({c.K}, rng) : Tensor();
    const ringtrain::Shape ys = ops::conv2d_output_shape(x.shape(), w.shape(), p);
    Tensor y_ref(ys), y(ys);
    ops::conv2d_forward(x, w, b, y_ref, p, ws);
    ops::activation_forward(ops::Activation::ReLU, y_ref, y_ref);
    ops::conv2d_forward_relu(x, w, b, y, p, ws);
    REQUIRE_CLOSE(y, ops_test::to_double(y_ref), 1e-6, 1e-6);
    for (float v : y.span()) REQUIRE(v >= 0.0f);

    const Tensor dy = ops_test::random_tensor(ys, rng);
    Tensor dx_ref(x.shape()), dx = Tensor::filled(x.shape(), 1e30f);
    ops::conv2d_backward_data(dy, w, dx_ref, p, ws);
    ops::activation_backward(ops::Activation::ReLU, x, dx_ref, dx_ref);
    ops::conv2d_backward_data_relu(dy, w, x, dx, p, ws);
    REQUIRE(same_values(dx, dx_ref));
}

}  // namespace conv_test

#include <catch2/catch.hpp>

#include "../../src/ops/cpu/cpu_ops.hpp"  // conv tuning hook, to exercise the grouped-GEMM path
#include "conv_test_util.hpp"
#include "ops_test_util.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/ops/ops.hpp"

using namespace ringtrain;
using namespace ringtrain::ops;
using namespace ops_test;

namespace {

using conv_test::Case;
using conv_test::dot;
using conv_test::params;


const Case kCases[] = {
    {1, 1, 5, 5, 1, 3, 3, 1, 1, 0, 0},    // smallest, C=1, batch 1
    {3, 2, 7, 6, 4, 3, 2, 2, 1, 1, 0},    // non-square kernel, stride 2 in h only, pad 1
    {1, 3, 9, 9, 2, 5, 3, 2, 2, 2, 1},    // stride 2, pad 2/1
    {3, 4, 8, 11, 5, 1, 1, 1, 1, 0, 0},   // 1x1 direct path
    {2, 3, 7, 6, 4, 1, 1, 2, 2, 0, 0},    // 1x1 with stride (im2col path)
    {3, 1, 13, 12, 3, 4, 4, 2, 2, 2, 2},  // even kernel, pad 2, C=1, batch 3
    {2, 5, 10, 10, 6, 3, 3, 1, 1, 1, 1},  // "same" conv
    {3, 2, 11, 9, 3, 2, 5, 1, 3, 0, 2},   // stride 3 in w
    {1, 2, 3, 4, 3, 3, 4, 1, 1, 0, 0},    // kernel equals the input: 1x1 output
};


// Input value at (n, c, h, w) with zero padding.
double at(const Tensor& x, int64_t n, int64_t c, int64_t h, int64_t w) {
    if (h < 0 || w < 0 || h >= x.dim(2) || w >= x.dim(3)) return 0.0;
    return x.data()[((n * x.dim(1) + c) * x.dim(2) + h) * x.dim(3) + w];
}

std::vector<double> naive_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Shape& ys,
                                  const Conv2dParams& p) {
    const int64_t N = ys[0], K = ys[1], P = ys[2], Q = ys[3], C = x.dim(1), R = w.dim(2), S = w.dim(3);
    std::vector<double> y(N * K * P * Q);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t i = 0; i < P; ++i)
                for (int64_t j = 0; j < Q; ++j) {
                    double s = bias ? bias->data()[k] : 0.0;
                    for (int64_t c = 0; c < C; ++c)
                        for (int64_t r = 0; r < R; ++r)
                            for (int64_t q = 0; q < S; ++q)
                                s += at(x, n, c, i * p.stride_h - p.pad_h + r, j * p.stride_w - p.pad_w + q) *
                                     w.data()[((k * C + c) * R + r) * S + q];
                    y[((n * K + k) * P + i) * Q + j] = s;
                }
    return y;
}

// dx and dw (and db) by scattering dy through the same index map as the forward.
void naive_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Conv2dParams& p, std::vector<double>& dx,
                    std::vector<double>& dw, std::vector<double>& db) {
    const int64_t N = dy.dim(0), K = dy.dim(1), P = dy.dim(2), Q = dy.dim(3);
    const int64_t C = x.dim(1), H = x.dim(2), W = x.dim(3), R = w.dim(2), S = w.dim(3);
    dx.assign(x.numel(), 0.0);
    dw.assign(w.numel(), 0.0);
    db.assign(K, 0.0);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t i = 0; i < P; ++i)
                for (int64_t j = 0; j < Q; ++j) {
                    const double g = dy.data()[((n * K + k) * P + i) * Q + j];
                    db[k] += g;
                    for (int64_t c = 0; c < C; ++c)
                        for (int64_t r = 0; r < R; ++r)
                            for (int64_t q = 0; q < S; ++q) {
                                const int64_t h = i * p.stride_h - p.pad_h + r, ww = j * p.stride_w - p.pad_w + q;
                                if (h < 0 || ww < 0 || h >= H || ww >= W) continue;
                                const int64_t xi = ((n * C + c) * H + h) * W + ww, wi = ((k * C + c) * R + r) * S + q;
                                dx[xi] += g * w.data()[wi];
                                dw[wi] += g * x.data()[xi];
                            }
                }
}


struct ColumnsGuard {
    explicit ColumnsGuard(int64_t c) { ops::cpu::set_conv_min_gemm_columns(c); }
    ~ColumnsGuard() { ops::cpu::set_conv_min_gemm_columns(0); }
};

}  // namespace

TEST_CASE("conv2d forward, backward data and backward filter match a direct double implementation", "[ops][conv]") {
    Rng rng(11);
    // 1: one GEMM per sample; 100000: all samples of the batch in one GEMM (grouped path).
    for (int64_t columns : {int64_t{1}, int64_t{100000}}) {
        ColumnsGuard guard(columns);
        ops::Workspace ws;
        for (const Case& c : kCases) {
            for (bool with_bias : {true, false}) {
                CAPTURE(columns, c.N, c.C, c.H, c.W, c.K, c.R, c.S, c.sh, c.sw, c.ph, c.pw, with_bias);
                const Conv2dParams p = params(c);
                const Tensor x = random_tensor({c.N, c.C, c.H, c.W}, rng);
                const Tensor w = random_tensor({c.K, c.C, c.R, c.S}, rng);
                const Tensor bias = with_bias ? random_tensor({c.K}, rng) : Tensor();
                const Shape ys = ops::conv2d_output_shape(x.shape(), w.shape(), p);
                REQUIRE(ys[2] == (c.H + 2 * c.ph - c.R) / c.sh + 1);
                REQUIRE(ys[3] == (c.W + 2 * c.pw - c.S) / c.sw + 1);
                Tensor y = Tensor::filled(ys, 1e30f);
                ops::conv2d_forward(x, w, bias, y, p, ws);
                REQUIRE_CLOSE(y, naive_forward(x, w, with_bias ? &bias : nullptr, ys, p), 1e-5, 1e-5);

                const Tensor dy = random_tensor(ys, rng);
                std::vector<double> dx_ref, dw_ref, db_ref;
                naive_backward(x, w, dy, p, dx_ref, dw_ref, db_ref);
                Tensor dx = Tensor::filled(x.shape(), 1e30f);
                ops::conv2d_backward_data(dy, w, dx, p, ws);
                REQUIRE_CLOSE(dx, dx_ref, 1e-5, 1e-5);

                Tensor dw = Tensor::filled(w.shape(), 1e30f);
                Tensor db = with_bias ? Tensor::filled({c.K}, 1e30f) : Tensor();
                ops::conv2d_backward_filter(x, dy, dw, db, p, ws);
                REQUIRE_CLOSE(dw, dw_ref, 1e-5, 1e-5);
                if (with_bias) REQUIRE_CLOSE(db, db_ref, 1e-5, 1e-5);

                // accumulate adds to what is there.
                ops::conv2d_backward_filter(x, dy, dw, db, p, ws, /*accumulate=*/true);
                for (auto& v : dw_ref) v *= 2.0;
                for (auto& v : db_ref) v *= 2.0;
                REQUIRE_CLOSE(dw, dw_ref, 1e-5, 1e-5);
                if (with_bias) REQUIRE_CLOSE(db, db_ref, 1e-5, 1e-5);

                // Adjoint identities: <conv(x), dy> = <x, dx> = <w, dw> (without bias).
                if (!with_bias) {
                    const double lhs = dot(y, dy);
                    REQUIRE(dot(x, dx) == Approx(lhs).epsilon(1e-4).margin(1e-4));
                    ops::conv2d_backward_filter(x, dy, dw, db, p, ws);
                    REQUIRE(dot(w, dw) == Approx(lhs).epsilon(1e-4).margin(1e-4));
                }
            }
        }
    }
}

TEST_CASE("conv2d backward matches central finite differences of the forward", "[ops][conv][gradcheck]") {
    Rng rng(12);
    ops::Workspace ws;
    for (const Case& c : {Case{2, 2, 6, 5, 3, 3, 2, 2, 1, 1, 1}, Case{1, 3, 5, 7, 2, 2, 3, 1, 2, 0, 2}}) {
        conv_test::check_conv_gradients(c, rng, ws);
    }
}

TEST_CASE("conv2d shape errors: user-caused InputError vs internal Error", "[ops][conv]") {
    ops::Workspace ws;
    // Kernel larger than the (padded) input is the user's configuration.
    REQUIRE_THROWS_AS(ops::conv2d_output_shape({1, 1, 4, 4}, {2, 1, 5, 3}, {}), InputError);
    REQUIRE_NOTHROW(ops::conv2d_output_shape({1, 1, 4, 4}, {2, 1, 5, 3}, {1, 1, 1, 0}));
    Conv2dParams zero_stride;
    zero_stride.stride_h = 0;
    REQUIRE_THROWS_AS(ops::conv2d_output_shape({1, 1, 4, 4}, {2, 1, 3, 3}, zero_stride), InputError);
    // Channel mismatch or a wrong output tensor is a bug in the caller: Error (not InputError).
    try {
        ops::conv2d_output_shape({1, 2, 4, 4}, {2, 3, 3, 3}, {});
        FAIL("expected an Error");
    } catch (const InputError&) {
        FAIL("channel mismatch should not be an InputError");
    } catch (const Error& e) {
        REQUIRE_THAT(e.what(), Catch::Contains("[2,3,3,3]"));
    }
    Tensor x({1, 1, 5, 5}), w({2, 1, 3, 3}), y({1, 2, 4, 4}), none;
    REQUIRE_THROWS_AS(ops::conv2d_forward(x, w, none, y, {}, ws), Error);
    Tensor bad_bias({3});
    Tensor y_ok({1, 2, 3, 3});
    REQUIRE_THROWS_AS(ops::conv2d_forward(x, w, bad_bias, y_ok, {}, ws), Error);
}

TEST_CASE("conv2d reuses its workspace once shapes are stable", "[ops][conv]") {
    Rng rng(13);
    ops::Workspace ws;
    const Conv2dParams p{1, 1, 1, 1};
    const Tensor x = random_tensor({4, 3, 9, 9}, rng), w = random_tensor({5, 3, 3, 3}, rng), b = random_tensor({5}, rng);
    Tensor y({4, 5, 9, 9}), dx(x.shape()), dw(w.shape()), db({5});
    ops::conv2d_forward(x, w, b, y, p, ws);
    ops::conv2d_backward_data(y, w, dx, p, ws);
    ops::conv2d_backward_filter(x, y, dw, db, p, ws);
    float* before = ws.floats(1);
    for (int i = 0; i < 3; ++i) {
        ops::conv2d_forward(x, w, b, y, p, ws);
        ops::conv2d_backward_data(y, w, dx, p, ws);
        ops::conv2d_backward_filter(x, y, dw, db, p, ws);
    }
    REQUIRE(ws.floats(1) == before);
}

TEST_CASE("conv2d with a fused ReLU equals conv2d then relu (forward and backward data, default path)",
          "[ops][conv][fusion]") {
    Rng rng(31);
    Workspace ws;
    for (const Case& c : kCases)
        for (bool bias : {true, false}) conv_test::check_relu_fusion(c, bias, rng, ws);
}

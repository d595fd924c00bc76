// oneDNN convolutions (train.cpu_conv = "onednn") against the im2col kernels and against finite differences, at
// awkward shapes. Its own main: in a build without oneDNN it checks that asking for it is an input error, prints
// why it skips, and returns 77 (ctest: skipped, not passed).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>

#include "conv_test_util.hpp"
#include "gemm_cases.hpp"
#include "ops_test_util.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/ops/cpu_conv.hpp"
#include "ringtrain/ops/ops.hpp"
#ifdef RINGTRAIN_WITH_ONEDNN
#include "../../src/ops/cpu/onednn_conv.hpp"  // primitives_made, to check that steady steps create none
#endif

using namespace ringtrain;
using namespace ringtrain::ops;
using namespace ops_test;

#ifdef RINGTRAIN_WITH_ONEDNN
namespace {

using conv_test::Case;
using conv_test::dot;
using conv_test::params;


const Case kCases[] = {
    {1, 1, 5, 5, 1, 3, 3, 1, 1, 0, 0},     // smallest, C=1, batch 1
    {3, 5, 7, 6, 4, 3, 2, 2, 1, 1, 0},     // non-square kernel, stride 2 in h only, pad 1, C=5, batch 3
    {1, 5, 9, 9, 2, 5, 3, 2, 2, 2, 1},     // stride 2, pad 2/1, C=5
    {3, 1, 13, 12, 3, 4, 4, 2, 2, 2, 2},   // even kernel, pad 2, C=1, batch 3
    {3, 5, 10, 10, 6, 3, 3, 1, 1, 1, 1},   // "same" conv
    {3, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2},   // LeNet-5 conv1
    {1, 5, 8, 11, 7, 1, 1, 1, 1, 0, 0},    // 1x1
    {3, 5, 6, 6, 8, 3, 3, 2, 2, 0, 0},     // stride 2 leaves the last input row and column unread
    {1, 5, 3, 4, 3, 3, 4, 1, 1, 0, 0},     // kernel equals the input: 1x1 output
    {3, 16, 9, 9, 32, 3, 3, 1, 1, 1, 1},   // channels in and out a multiple of oneDNN's block of 8
};



// Sets the CPU convolution path for one scope and restores auto.
struct PathGuard {
    explicit PathGuard(CpuConv c) { set_cpu_conv(c); }
    ~PathGuard() { set_cpu_conv(CpuConv::Auto); }
};

struct Grads {
    Tensor y, dx, dw, db;
};

// Forward, backward data, backward filter (then again accumulating) on the path in force.
Grads run(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& dy, const Conv2dParams& p,
          Workspace& ws) {
    Grads g{Tensor::filled(dy.shape(), 1e30f), Tensor::filled(x.shape(), 1e30f), Tensor::filled(w.shape(), 1e30f),
            bias.empty() ? Tensor() : Tensor::filled(bias.shape(), 1e30f)};
    ops::conv2d_forward(x, w, bias, g.y, p, ws);
    ops::conv2d_backward_data(dy, w, g.dx, p, ws);
    ops::conv2d_backward_filter(x, dy, g.dw, g.db, p, ws);
    return g;
}

}  // namespace

TEST_CASE("oneDNN conv forward and backward equal the im2col path at awkward shapes", "[ops][conv][onednn]") {
    Rng rng(21);
    Workspace ws_im2col, ws_onednn;
    for (const Case& c : kCases) {
        for (bool with_bias : {true, false}) {
            CAPTURE(c.N, c.C, c.H, c.W, c.K, c.R, c.S, c.sh, c.sw, c.ph, c.pw, with_bias);
            const Conv2dParams p = params(c);
            const Tensor x = random_tensor({c.N, c.C, c.H, c.W}, rng);
            const Tensor w = random_tensor({c.K, c.C, c.R, c.S}, rng);
            const Tensor bias = with_bias ? random_tensor({c.K}, rng) : Tensor();
            const Tensor dy = random_tensor(ops::conv2d_output_shape(x.shape(), w.shape(), p), rng);
            Grads ref, got;
            {
                PathGuard path(CpuConv::Im2col);
                ref = run(x, w, bias, dy, p, ws_im2col);
            }
            {
                PathGuard path(CpuConv::OneDnn);
                got = run(x, w, bias, dy, p, ws_onednn);
                REQUIRE(cpu::onednn::primitives_made(ws_onednn) > 0);
            }
            REQUIRE_CLOSE(got.y, to_double(ref.y), 1e-5, 1e-4);
            REQUIRE_CLOSE(got.dx, to_double(ref.dx), 1e-5, 1e-4);
            REQUIRE_CLOSE(got.dw, to_double(ref.dw), 1e-5, 1e-4);
            if (with_bias) REQUIRE_CLOSE(got.db, to_double(ref.db), 1e-5, 1e-4);

            // accumulate adds to what is there (oneDNN itself overwrites).
            {
                PathGuard path(CpuConv::OneDnn);
                ops::conv2d_backward_filter(x, dy, got.dw, got.db, p, ws_onednn, /*accumulate=*/true);
            }
            std::vector<double> dw2 = to_double(ref.dw), db2 = to_double(ref.db);
            for (auto& v : dw2) v *= 2.0;
            for (auto& v : db2) v *= 2.0;
            REQUIRE_CLOSE(got.dw, dw2, 1e-5, 1e-4);
            if (with_bias) REQUIRE_CLOSE(got.db, db2, 1e-5, 1e-4);
        }
    }
}

TEST_CASE("oneDNN conv backward matches central finite differences of its forward", "[ops][conv][onednn][gradcheck]") {
    Rng rng(22);
    Workspace ws;
    PathGuard path(CpuConv::OneDnn);
    for (const Case& c : {Case{3, 5, 6, 5, 3, 3, 2, 2, 1, 1, 1}, Case{1, 1, 5, 7, 2, 2, 3, 1, 2, 0, 2}}) {
        conv_test::check_conv_gradients(c, rng, ws);
    }
}

TEST_CASE("ReLU fused into the convolution equals the separate ReLU on both CPU paths", "[ops][conv][onednn][fusion]") {
    Rng rng(24);
    // kCases plus channel counts around oneDNN's block of 8 (the masked copy out of nChw8c, padded last block).
    std::vector<Case> cases(std::begin(kCases), std::end(kCases));
    cases.push_back({2, 7, 6, 5, 9, 3, 3, 1, 1, 1, 0});
    cases.push_back({2, 9, 7, 7, 8, 2, 3, 2, 1, 0, 1});
    cases.push_back({2, 32, 8, 8, 16, 3, 3, 1, 1, 0, 0});
    for (CpuConv path : {CpuConv::Im2col, CpuConv::OneDnn}) {
        PathGuard guard(path);
        Workspace ws;
        for (const Case& c : cases)
            for (bool bias : {true, false}) conv_test::check_relu_fusion(c, bias, rng, ws);
    }
}

TEST_CASE("oneDNN conv with a fused ReLU: one more primitive, made once", "[ops][conv][onednn][fusion]") {
    Rng rng(25);
    Workspace ws;
    PathGuard path(CpuConv::OneDnn);
    const Conv2dParams p{1, 1, 0, 0};
    const Tensor x = conv_test::relu_output({4, 16, 9, 9}, rng), w = random_tensor({8, 16, 3, 3}, rng);
    Tensor y({4, 8, 7, 7}), dx(x.shape());
    for (int i = 0; i < 3; ++i) {
        ops::conv2d_forward_relu(x, w, Tensor(), y, p, ws);
        ops::conv2d_backward_data_relu(y, w, x, dx, p, ws);
    }
    REQUIRE(cpu::onednn::primitives_made(ws) == 2);  // the forward with its post-op, backward data
    ops::conv2d_forward(x, w, Tensor(), y, p, ws);   // the plain forward is another primitive
    REQUIRE(cpu::onednn::primitives_made(ws) == 3);
}

TEST_CASE("oneDNN conv makes its primitives once per shape, not per step", "[ops][conv][onednn]") {
    Rng rng(23);
    Workspace ws;
    PathGuard path(CpuConv::OneDnn);
    const Conv2dParams p{1, 1, 1, 1};
    const Tensor x = random_tensor({4, 3, 9, 9}, rng), w = random_tensor({5, 3, 3, 3}, rng), b = random_tensor({5}, rng);
    Tensor y({4, 5, 9, 9}), dx(x.shape()), dw(w.shape()), db({5});
    auto step = [&] {
        ops::conv2d_forward(x, w, b, y, p, ws);
        ops::conv2d_backward_data(y, w, dx, p, ws);
        ops::conv2d_backward_filter(x, y, dw, db, p, ws);
    };
    step();
    REQUIRE(cpu::onednn::primitives_made(ws) == 3);  // forward, backward data, backward weights
    for (int i = 0; i < 3; ++i) step();
    REQUIRE(cpu::onednn::primitives_made(ws) == 3);
    // A second batch size (evaluation, a last short batch) gets its own set, once; the first stays cached.
    const Tensor x2 = random_tensor({2, 3, 9, 9}, rng);
    Tensor y2({2, 5, 9, 9});
    ops::conv2d_forward(x2, w, b, y2, p, ws);
    ops::conv2d_forward(x2, w, b, y2, p, ws);
    step();
    REQUIRE(cpu::onednn::primitives_made(ws) == 4);
}

TEST_CASE("layer products on oneDNN's float32 matmul equal OpenBLAS's gemm, every orientation", "[ops][gemm][onednn]") {
    Rng rng(27);
    Workspace ws;
    gemm_cases::for_each(rng, [&](const gemm_cases::Case& c) {
        Tensor ref = c.c0.clone(), got = c.c0.clone(), im2col = c.c0.clone();
        ops::gemm(c.a, c.trans_a, c.b, c.trans_b, ref, 1.0f, c.beta);
        {
            PathGuard path(CpuConv::OneDnn);
            REQUIRE(gemm_uses_onednn(c.m, c.k, c.n));
            ops::layer_gemm(c.a, c.trans_a, c.b, c.trans_b, got, 1.0f, c.beta, ws);
        }
        REQUIRE_CLOSE(got, to_double(ref), 1e-5, 1e-4);
        {
            PathGuard path(CpuConv::Im2col);  // OpenBLAS: the same bits as gemm
            REQUIRE_FALSE(gemm_uses_onednn(c.m, c.k, c.n));
            ops::layer_gemm(c.a, c.trans_a, c.b, c.trans_b, im2col, 1.0f, c.beta, ws);
        }
        REQUIRE(std::equal(im2col.span().begin(), im2col.span().end(), ref.span().begin()));
    });
    REQUIRE(gemm_uses_onednn(64, 64, 64) == cpu::onednn::has_avx512());  // auto
    REQUIRE_FALSE(gemm_uses_onednn(64, 64, 10));                          // below kMinOneDnnGemmDim
}

TEST_CASE("train.cpu_conv: forced paths everywhere, auto per direction and channel count", "[ops][conv][onednn]") {
    const Shape one_channel{8, 1, 28, 28}, few{8, 3, 64, 64}, many{8, 32, 16, 16};
    const ConvDirection all[] = {ConvDirection::Forward, ConvDirection::ForwardRelu, ConvDirection::BackwardData,
                                 ConvDirection::BackwardFilter};
    {
        PathGuard path(CpuConv::OneDnn);
        for (ConvDirection d : all)
            for (const Shape& s : {one_channel, few, many}) REQUIRE(conv_uses_onednn(d, s));
        REQUIRE_THAT(cpu_conv_description(), Catch::StartsWith("oneDNN 2.") && Catch::EndsWith(" jit)"));
    }
    {
        PathGuard path(CpuConv::Im2col);
        for (ConvDirection d : all)
            for (const Shape& s : {one_channel, few, many}) REQUIRE_FALSE(conv_uses_onednn(d, s));
        REQUIRE_THAT(cpu_conv_description(), Catch::StartsWith("im2col + "));
    }
    REQUIRE(cpu_conv() == CpuConv::Auto);
    if (cpu::onednn::has_avx512()) {
        for (ConvDirection d : all)
            for (const Shape& s : {one_channel, few, many}) REQUIRE(conv_uses_onednn(d, s));
    } else {
        for (ConvDirection d : all)  // a fused ReLU makes oneDNN's forward the faster one even at one channel
            REQUIRE(conv_uses_onednn(d, one_channel) == (d == ConvDirection::ForwardRelu));
        for (ConvDirection d : all) REQUIRE(conv_uses_onednn(d, few));
        REQUIRE(conv_uses_onednn(ConvDirection::Forward, many));
        REQUIRE(conv_uses_onednn(ConvDirection::BackwardData, many));
        REQUIRE_FALSE(conv_uses_onednn(ConvDirection::BackwardFilter, many));
        REQUIRE(conv_uses_onednn(ConvDirection::BackwardFilter, Shape{8, 16, 32, 32}));  // the rule's boundary
        REQUIRE_THAT(cpu_conv_description(), Catch::Contains("oneDNN 2.") && Catch::Contains("im2col + ") &&
                                                 Catch::Contains("(auto, AVX2)"));
    }
}
#endif

int main(int argc, char** argv) {
    if (!onednn_available()) {
        try {
            set_cpu_conv(CpuConv::OneDnn);
            std::fprintf(stderr, "FAILED: set_cpu_conv(onednn) was accepted by a build without oneDNN\n");
            return 1;
        } catch (const InputError&) {
        }
        std::printf("SKIPPED: this build has no oneDNN (libdnnl-dev not found at configure time); only im2col runs\n");
        return 77;
    }
    return Catch::Session().run(argc, argv);
}

TEST_CASE("oneDNN conv keeps the recently used shapes when a ninth comes (sync.balance moves batch sizes)",
          "[ops][conv][onednn]") {
    Rng rng(26);
    Workspace ws;
    PathGuard path(CpuConv::OneDnn);
    const Conv2dParams p{1, 1, 1, 1};
    const Tensor w = random_tensor({5, 3, 3, 3}, rng), b = random_tensor({5}, rng);
    auto forward = [&](int64_t n) {
        const Tensor x = random_tensor({n, 3, 6, 6}, rng);
        Tensor y({n, 5, 6, 6});
        ops::conv2d_forward(x, w, b, y, p, ws);
    };
    for (int64_t n = 1; n <= 8; ++n) forward(n);  // the cache is full: 8 shapes
    REQUIRE(cpu::onednn::primitives_made(ws) == 8);
    forward(1);  // the oldest, used again: now the most recent
    REQUIRE(cpu::onednn::primitives_made(ws) == 8);
    forward(9);  // a ninth shape: the one used longest ago (batch 2) goes, not all of them
    REQUIRE(cpu::onednn::primitives_made(ws) == 9);
    forward(1);
    forward(3);
    forward(8);
    REQUIRE(cpu::onednn::primitives_made(ws) == 9);
    forward(2);  // evicted: built again
    REQUIRE(cpu::onednn::primitives_made(ws) == 10);
}

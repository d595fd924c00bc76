// train.cpu_precision = "bf16": oneDNN convolutions and linear layers' products that read bfloat16 and accumulate
// in float32. The reference is the float32 path (im2col, OpenBLAS) on inputs rounded to bf16 first: a product of two
// bf16 values is exact in float32, so the two differ only by the order of float32 additions. Its own main: where the build or the CPU cannot run bf16,
// it checks that asking for it is an input error naming the key, prints why it skips, and returns 77 (ctest: skipped).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "conv_test_util.hpp"
#include "gemm_cases.hpp"
#include "ops_test_util.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/ops/cpu_conv.hpp"
#include "ringtrain/ops/ops.hpp"
#ifdef RINGTRAIN_WITH_ONEDNN
#include "../../src/ops/cpu/onednn_conv.hpp"  // primitives_made
#endif

using namespace ringtrain;
using namespace ringtrain::ops;
using namespace ops_test;

namespace {

// Round to nearest, ties to even (what oneDNN's f32 -> bf16 reorder does); the tests' values are finite.
float to_bf16(float f) {
    uint32_t u = 0;
    std::memcpy(&u, &f, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

Tensor rounded(const Tensor& t) {
    Tensor r(t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) r.data()[i] = to_bf16(t.data()[i]);
    return r;
}

// Sets the path and precision for one scope; restores auto and float32.
struct Setting {
    Setting(CpuConv c, CpuPrecision p) {
        set_cpu_conv(c);
        set_cpu_precision(p);
    }
    ~Setting() {
        set_cpu_precision(CpuPrecision::Fp32);
        set_cpu_conv(CpuConv::Auto);
    }
};

struct Grads {
    Tensor y, dx, dw, db;
};

Grads run(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& dy, const Conv2dParams& p,
          Workspace& ws) {
    Grads g{Tensor::filled(dy.shape(), 1e30f), Tensor::filled(x.shape(), 1e30f), Tensor::filled(w.shape(), 1e30f),
            Tensor::filled(bias.shape(), 1e30f)};
    ops::conv2d_forward(x, w, bias, g.y, p, ws);
    ops::conv2d_backward_data(dy, w, g.dx, p, ws);
    ops::conv2d_backward_filter(x, dy, g.dw, g.db, p, ws);
    return g;
}

void require_close(const Grads& got, const Grads& ref) {
    REQUIRE_CLOSE(got.y, to_double(ref.y), 1e-5, 1e-4);
    REQUIRE_CLOSE(got.dx, to_double(ref.dx), 1e-5, 1e-4);
    REQUIRE_CLOSE(got.dw, to_double(ref.dw), 1e-5, 1e-4);
    REQUIRE_CLOSE(got.db, to_double(ref.db), 1e-5, 1e-4);
}

bool bit_equal(const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * 4) == 0;
}

using conv_test::Case;

}  // namespace

TEST_CASE("bf16 convolutions equal float32 ones on bf16-rounded inputs, at awkward shapes", "[ops][conv][bf16]") {
    Rng rng(31);
    const Case cases[] = {
        {3, 6, 7, 6, 4, 3, 2, 2, 1, 1, 0},    // the threshold's channel count, non-square kernel, stride 2 in h
        {1, 7, 9, 9, 5, 5, 3, 2, 2, 2, 1},    // odd channels, stride 2, pad 2/1
        {2, 16, 9, 9, 32, 3, 3, 1, 1, 1, 1},  // "same", channels a multiple of oneDNN's block
        {1, 9, 8, 11, 7, 1, 1, 1, 1, 0, 0},   // 1x1
        {3, 8, 6, 6, 8, 3, 3, 2, 2, 0, 0},    // stride 2 leaves the last row and column unread
        {2, 32, 8, 8, 16, 3, 3, 1, 1, 0, 0},  // the MNIST CNN's conv2 in small
    };
    for (const Case& c : cases) {
        CAPTURE(c.N, c.C, c.H, c.W, c.K, c.R, c.S, c.sh, c.sw, c.ph, c.pw);
        const Conv2dParams p = conv_test::params(c);
        const Tensor x = random_tensor({c.N, c.C, c.H, c.W}, rng), w = random_tensor({c.K, c.C, c.R, c.S}, rng);
        const Tensor bias = random_tensor({c.K}, rng);
        const Tensor dy = random_tensor(ops::conv2d_output_shape(x.shape(), w.shape(), p), rng);
        REQUIRE(c.C >= kMinBf16Channels);
        Workspace ws_ref, ws_fp32, ws_bf16;
        Grads ref, fp32, got;
        {
            Setting s(CpuConv::Im2col, CpuPrecision::Fp32);
            ref = run(rounded(x), rounded(w), bias, rounded(dy), p, ws_ref);
        }
        {
            Setting s(CpuConv::OneDnn, CpuPrecision::Fp32);
            fp32 = run(x, w, bias, dy, p, ws_fp32);
        }
        {
            Setting s(CpuConv::OneDnn, CpuPrecision::Bf16);
            REQUIRE(conv_runs_bf16(x.shape()));
            got = run(x, w, bias, dy, p, ws_bf16);
        }
        require_close(got, ref);
        // And it did round: the float32 result on the unrounded inputs is further away than float32 sums differ.
        REQUIRE(max_violation(got.y, to_double(fp32.y), 1e-5, 1e-4) > 1.0);
        REQUIRE(max_violation(got.dw, to_double(fp32.dw), 1e-5, 1e-4) > 1.0);
    }
}

TEST_CASE("bf16: a convolution with fewer input channels than the threshold runs in float32", "[ops][conv][bf16]") {
    Rng rng(32);
    for (const Case& c : {Case{3, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2}, Case{3, 5, 10, 10, 6, 3, 3, 1, 1, 1, 1}}) {
        CAPTURE(c.C);
        const Conv2dParams p = conv_test::params(c);
        const Tensor x = random_tensor({c.N, c.C, c.H, c.W}, rng), w = random_tensor({c.K, c.C, c.R, c.S}, rng);
        const Tensor bias = random_tensor({c.K}, rng);
        const Tensor dy = random_tensor(ops::conv2d_output_shape(x.shape(), w.shape(), p), rng);
        Workspace ws_fp32, ws_bf16;
        Grads fp32, got;
        {
            Setting s(CpuConv::OneDnn, CpuPrecision::Fp32);
            fp32 = run(x, w, bias, dy, p, ws_fp32);
        }
        {
            Setting s(CpuConv::OneDnn, CpuPrecision::Bf16);
            REQUIRE_FALSE(conv_runs_bf16(x.shape()));
            got = run(x, w, bias, dy, p, ws_bf16);
        }
        REQUIRE(bit_equal(got.y, fp32.y));
        REQUIRE(bit_equal(got.dx, fp32.dx));
        REQUIRE(bit_equal(got.dw, fp32.dw));
        REQUIRE(bit_equal(got.db, fp32.db));
    }
}

TEST_CASE("bf16: a fused ReLU and accumulated weight gradients, as the model runs them", "[ops][conv][bf16]") {
    Rng rng(33);
    const Case c{2, 16, 7, 7, 8, 3, 3, 1, 1, 1, 1};
    const Conv2dParams p = conv_test::params(c);
    const Tensor x = conv_test::relu_output({c.N, c.C, c.H, c.W}, rng), w = random_tensor({c.K, c.C, c.R, c.S}, rng);
    const Tensor bias = random_tensor({c.K}, rng);
    const Shape ys = ops::conv2d_output_shape(x.shape(), w.shape(), p);
    const Tensor dy = random_tensor(ys, rng);
    Tensor y_ref(ys), dx_ref(x.shape()), dw_ref = Tensor::filled(w.shape(), 0.5f), db_ref = Tensor::filled({c.K}, 0.5f);
    {
        Setting s(CpuConv::Im2col, CpuPrecision::Fp32);
        Workspace ws;
        ops::conv2d_forward_relu(rounded(x), rounded(w), bias, y_ref, p, ws);
        ops::conv2d_backward_data_relu(rounded(dy), rounded(w), x, dx_ref, p, ws);
        ops::conv2d_backward_filter(rounded(x), rounded(dy), dw_ref, db_ref, p, ws, /*accumulate=*/true);
    }
    Tensor y(ys), dx(x.shape()), dw = Tensor::filled(w.shape(), 0.5f), db = Tensor::filled({c.K}, 0.5f);
    Setting s(CpuConv::OneDnn, CpuPrecision::Bf16);
    Workspace ws;
    ops::conv2d_forward_relu(x, w, bias, y, p, ws);
    ops::conv2d_backward_data_relu(dy, w, x, dx, p, ws);
    ops::conv2d_backward_filter(x, dy, dw, db, p, ws, /*accumulate=*/true);
    REQUIRE_CLOSE(y, to_double(y_ref), 1e-5, 1e-4);
    REQUIRE_CLOSE(dx, to_double(dx_ref), 1e-5, 1e-4);
    REQUIRE_CLOSE(dw, to_double(dw_ref), 1e-5, 1e-4);
    REQUIRE_CLOSE(db, to_double(db_ref), 1e-5, 1e-4);
}

#ifdef RINGTRAIN_WITH_ONEDNN
TEST_CASE("bf16 and float32 primitives of one shape are kept apart, each made once", "[ops][conv][bf16]") {
    Rng rng(34);
    const Conv2dParams p{1, 1, 1, 1};
    const Tensor x = random_tensor({2, 8, 6, 6}, rng), w = random_tensor({4, 8, 3, 3}, rng);
    Tensor y32({2, 4, 6, 6}), y16({2, 4, 6, 6});
    Workspace ws;
    set_cpu_conv(CpuConv::OneDnn);
    for (int i = 0; i < 2; ++i) {
        set_cpu_precision(CpuPrecision::Fp32);
        ops::conv2d_forward(x, w, Tensor(), y32, p, ws);
        set_cpu_precision(CpuPrecision::Bf16);
        ops::conv2d_forward(x, w, Tensor(), y16, p, ws);
    }
    set_cpu_precision(CpuPrecision::Fp32);
    set_cpu_conv(CpuConv::Auto);
    REQUIRE(cpu::onednn::primitives_made(ws) == 2);
    REQUIRE_FALSE(bit_equal(y32, y16));
}
#endif

TEST_CASE("bf16 layer products equal float32 ones on bf16-rounded inputs, every orientation", "[ops][gemm][bf16]") {
    Rng rng(35);
    Workspace ws;  // one call site for all: entries are keyed by shape, orientation and beta
    gemm_cases::for_each(rng, [&](const gemm_cases::Case& c) {
        Tensor ref = c.c0.clone(), plain = c.c0.clone(), got = c.c0.clone(), again = c.c0.clone();
        ops::gemm(rounded(c.a), c.trans_a, rounded(c.b), c.trans_b, ref, 1.0f, c.beta);
        ops::gemm(c.a, c.trans_a, c.b, c.trans_b, plain, 1.0f, c.beta);
        set_cpu_precision(CpuPrecision::Bf16);
        REQUIRE(gemm_runs_bf16(c.m, c.k, c.n));
        ops::layer_gemm(c.a, c.trans_a, c.b, c.trans_b, got, 1.0f, c.beta, ws);
        ops::layer_gemm(c.a, c.trans_a, c.b, c.trans_b, again, 1.0f, c.beta, ws);  // the cached primitive
        set_cpu_precision(CpuPrecision::Fp32);
        REQUIRE_CLOSE(got, to_double(ref), 1e-5, 1e-4);
        REQUIRE(max_violation(got, to_double(plain), 1e-5, 1e-4) > 1.0);  // it did round
        REQUIRE(bit_equal(got, again));
    });
}

TEST_CASE("bf16 layer products: small ones and other betas stay float32", "[ops][gemm][bf16]") {
    Rng rng(36);
    const Tensor a = random_tensor({64, 64}, rng), b = random_tensor({64, 10}, rng), b2 = random_tensor({64, 64}, rng);
    Workspace ws;
    Tensor fp32({64, 10}), got({64, 10}), fp32_half = Tensor::filled({64, 64}, 1.0f), half = fp32_half.clone();
    ops::gemm(a, false, b, false, fp32);
    ops::gemm(a, false, b2, false, fp32_half, 1.0f, 0.5f);
    set_cpu_precision(CpuPrecision::Bf16);
    REQUIRE_FALSE(gemm_runs_bf16(64, 64, 10));  // 10 columns: below kMinOneDnnGemmDim
    ops::layer_gemm(a, false, b, false, got, 1.0f, 0.0f, ws);
    ops::layer_gemm(a, false, b2, false, half, 1.0f, 0.5f, ws);  // beta 0.5: float32
    set_cpu_precision(CpuPrecision::Fp32);
    REQUIRE(bit_equal(got, fp32));
    REQUIRE(bit_equal(half, fp32_half));
}

TEST_CASE("train.cpu_precision: bf16 refuses im2col, and says what runs", "[ops][conv][bf16]") {
    set_cpu_conv(CpuConv::Im2col);
    try {
        set_cpu_precision(CpuPrecision::Bf16);
        FAIL("bf16 with train.cpu_conv im2col was accepted");
    } catch (const InputError& e) {
        REQUIRE_THAT(e.what(), Catch::StartsWith("train.cpu_precision \"bf16\"") && Catch::Contains("train.cpu_conv"));
    }
    REQUIRE(cpu_precision() == CpuPrecision::Fp32);
    set_cpu_conv(CpuConv::Auto);
    set_cpu_precision(CpuPrecision::Bf16);
    REQUIRE_THAT(cpu_precision_description(), Catch::StartsWith("bf16 for oneDNN convolutions with 6 or more"));
    set_cpu_precision(CpuPrecision::Fp32);
    REQUIRE_THAT(cpu_precision_description(), Catch::StartsWith("fp32 (bf16 available"));
}

int main(int argc, char** argv) {
    const std::string why = bf16_unavailable_reason();
    if (!why.empty()) {
        try {
            set_cpu_precision(CpuPrecision::Bf16);
            std::fprintf(stderr, "FAILED: bf16 was accepted where it cannot run (%s)\n", why.c_str());
            return 1;
        } catch (const InputError& e) {
            if (std::string(e.what()).rfind("train.cpu_precision", 0) != 0) {
                std::fprintf(stderr, "FAILED: the error does not name train.cpu_precision: %s\n", e.what());
                return 1;
            }
        }
        std::printf("SKIPPED: bf16 convolutions cannot run here: %s\n", why.c_str());
        return 77;
    }
    return Catch::Session().run(argc, argv);
}

// The CPU convolution choice (ops/cpu_conv.hpp) and the rule behind `auto`.
#include "ringtrain/ops/cpu_conv.hpp"

#include <algorithm>
#include <atomic>

#include "ringtrain/core/error.hpp"
#include "ringtrain/ops/threads.hpp"
#ifdef RINGTRAIN_WITH_ONEDNN
#include "cpu/onednn_conv.hpp"
#endif

namespace ringtrain::ops {

namespace {
std::atomic<CpuConv> g_choice{CpuConv::Auto};
std::atomic<CpuPrecision> g_precision{CpuPrecision::Fp32};
std::atomic<int64_t> g_min_bf16_channels{kMinBf16Channels};

// The auto rule, per direction, from one-thread timings of every convolution of LeNet-5, the MNIST CNN and the
// quality CNN on an AMD EPYC (AVX2, no AVX-512) with oneDNN 2.6.3 vs im2col + OpenBLAS 0.3.21 (bench_conv_paths,
// CPU time; bench/RESULTS.md, "CPU convolutions: oneDNN vs im2col"):
//  - one input channel (first layers): im2col, whose direct single-channel kernel beat oneDNN up to 1.5x forward and
//    3-4x in both gradients (oneDNN has no blocked layout to win with at C = 1); but a forward with a fused ReLU runs
//    on oneDNN there too, whose post-op is free where im2col needs a pass over the output (MNIST conv1 1.7x, LeNet-5
//    conv1 1.0x);
//  - forward and data gradient otherwise: oneDNN, 1.0-2.0x faster (its AVX2 JIT kernels vs im2col's copies);
//  - weight gradient with 32 or more input channels: im2col (one K x CRS x N*PQ GEMM is OpenBLAS's best shape;
//    oneDNN's AVX2 backward-weights kernel plus its two reorders measured 0.65-1.16x); up to 16 channels: oneDNN
//    (1.2-1.5x at C = 3, 6 and 16).
// Where oneDNN has AVX-512 kernels (oneDNN's JIT best case, and the user's Intel Xeon of issue 17) auto takes oneDNN
// in every direction, as PyTorch does there; that branch is not measured on this project's machines.
bool auto_uses_onednn(ConvDirection d, const Shape& x) {
#ifdef RINGTRAIN_WITH_ONEDNN
    if (cpu::onednn::has_avx512()) return true;
    const int64_t channels = x.size() == 4 ? x[1] : 0;
    if (d == ConvDirection::ForwardRelu) return true;
    if (channels <= 1) return false;
    return d != ConvDirection::BackwardFilter || channels <= 16;
#else
    (void)d;
    (void)x;
    return false;
#endif
}
}  // namespace

bool onednn_available() {
#ifdef RINGTRAIN_WITH_ONEDNN
    return true;
#else
    return false;
#endif
}

void set_cpu_conv(CpuConv c) {
    if (c == CpuConv::OneDnn && !onednn_available())
        throw InputError("train.cpu_conv is \"onednn\" but this build has no oneDNN: install libdnnl-dev and rebuild, "
                         "or set train.cpu_conv to \"auto\" or \"im2col\"");
    g_choice.store(c);
}

CpuConv cpu_conv() { return g_choice.load(std::memory_order_relaxed); }

bool conv_uses_onednn(ConvDirection d, const Shape& x) {
    switch (cpu_conv()) {
        case CpuConv::OneDnn: return true;
        case CpuConv::Im2col: return false;
        case CpuConv::Auto: break;
    }
    return auto_uses_onednn(d, x);
}

std::string cpu_conv_description() {
    const std::string im2col = "im2col + " + cpu_gemm_library();
#ifdef RINGTRAIN_WITH_ONEDNN
    switch (cpu_conv()) {
        case CpuConv::OneDnn: return cpu::onednn::description();
        case CpuConv::Im2col: return im2col;
        case CpuConv::Auto: break;
    }
    if (cpu::onednn::has_avx512())
        return cpu::onednn::description() + " (auto: AVX-512; linear layers' products 32 or more wide too)";
    return cpu::onednn::description() + " for forwards (at one input channel only with a fused ReLU), data "
           "gradients and weight gradients up to 16 input channels; " + im2col + " for the other one-channel "
           "convolutions and weight gradients above 16 input channels (auto, AVX2)";
#else
    return im2col + " (built without oneDNN)";
#endif
}

// Bf16 is only worth it where the CPU multiplies bf16 pairs natively (AVX512-BF16's vdpbf16ps: twice the float32
// FMA's products per instruction; AMX far more). oneDNN would emulate it elsewhere, slower than float32, so it is
// refused there rather than run slowly. Below kMinBf16Channels input channels float32 stays: one thread on an AMD
// EPYC with AVX512-BF16 (bench_conv_paths, bench/RESULTS.md "bf16 convolutions on the CPU"), bf16 / float32 time was
// 1.1-6x slower at C = 1 and 3 (the weight gradient of a one-channel input worst), and 0.5-0.9 from C = 6 up.
std::string bf16_unavailable_reason() {
#ifdef RINGTRAIN_WITH_ONEDNN
    if (cpu::onednn::has_bf16()) return {};
    return "this CPU has neither AVX512-BF16 nor AMX (oneDNN: " + cpu::onednn::description() + ")";
#else
    return "this build has no oneDNN (install libdnnl-dev and rebuild)";
#endif
}

void set_cpu_precision(CpuPrecision p, int64_t min_channels) {
    if (p == CpuPrecision::Bf16) {
        const std::string why = bf16_unavailable_reason();
        if (!why.empty()) throw InputError("train.cpu_precision is \"bf16\" but " + why + "; set it to \"fp32\"");
        if (cpu_conv() == CpuConv::Im2col)
            throw InputError("train.cpu_precision \"bf16\" runs on oneDNN, and train.cpu_conv is \"im2col\"; set "
                             "train.cpu_conv to \"auto\" or \"onednn\", or train.cpu_precision to \"fp32\"");
    }
    g_precision.store(p);
    g_min_bf16_channels.store(min_channels);
}

CpuPrecision cpu_precision() { return g_precision.load(std::memory_order_relaxed); }

bool conv_runs_bf16(const Shape& x) {
    return cpu_precision() == CpuPrecision::Bf16 && x.size() == 4 &&
           x[1] >= g_min_bf16_channels.load(std::memory_order_relaxed);
}

// Linear layers, per step (forward + both gradients, one thread, the same EPYC; bench_throughput's per-layer times),
// OpenBLAS 0.3.21 (its Haswell kernels: it has none for AVX-512 on this CPU) / oneDNN float32 / oneDNN bf16: the
// MNIST CNN's fc1 (128 x 9216 x 128) 10.1-10.6 / 6.7 / 6.8 ms, AlexNet-CIFAR's fc6 and fc7 20.6 / 13.8 and
// 9.2 / 6.0 ms, LeNet-5's fc1 (64 x 400 x 120) 0.24 / 0.13 / 0.11 ms, its fc2 (64 x 120 x 84) 0.043-0.049 on each;
// a 10-wide output layer stays on OpenBLAS by the threshold. On AVX2 OpenBLAS stays (not measured against oneDNN).
bool gemm_runs_bf16(int64_t m, int64_t k, int64_t n) {
    return cpu_precision() == CpuPrecision::Bf16 && std::min({m, k, n}) >= kMinOneDnnGemmDim;
}

bool gemm_uses_onednn(int64_t m, int64_t k, int64_t n) {
#ifdef RINGTRAIN_WITH_ONEDNN
    if (std::min({m, k, n}) < kMinOneDnnGemmDim) return false;
    return cpu_conv() == CpuConv::OneDnn || (cpu_conv() == CpuConv::Auto && cpu::onednn::has_avx512());
#else
    (void)m;
    (void)k;
    (void)n;
    return false;
#endif
}

std::string cpu_precision_description() {
    const std::string why = bf16_unavailable_reason();
    if (cpu_precision() == CpuPrecision::Bf16)
        return "bf16 for oneDNN convolutions with " + std::to_string(g_min_bf16_channels.load()) +
               " or more input channels and linear layers' products with every dimension " +
               std::to_string(kMinOneDnnGemmDim) + " or more (float32 sums; everything else float32)";
    return "fp32" + (why.empty() ? std::string(" (bf16 available: train.cpu_precision)")
                                 : " (bf16 unavailable: " + why + ")");
}

std::string cpu_fusion_description() {
    return std::string("a relu after a conv2d runs in the convolution's forward (") +
           (onednn_available() ? "a oneDNN post-op where oneDNN runs it, " : "") +
           "a pass over its output otherwise) or a batchnorm's (in its normalising pass), and its backward in the conv2d "
           "or maxpool2d after the relu";
}

}  // namespace ringtrain::ops

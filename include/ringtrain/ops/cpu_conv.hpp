// Which implementation runs CPU convolutions: oneDNN (the library PyTorch's CPU convolutions use; the CPU counterpart
// of cuDNN) or the project's own im2col + GEMM kernels (always built, the fallback). Process-wide like the intra-op
// thread count: set once from train.cpu_conv before the first step.
#pragma once

#include <string>

#include "ringtrain/core/tensor.hpp"

namespace ringtrain::ops {

// Auto: per convolution and direction, whichever measured faster on this CPU family (the rule and its measurements:
// src/ops/cpu_conv.cpp); the other two force one implementation everywhere.
enum class CpuConv { Auto, OneDnn, Im2col };
// ForwardRelu: a forward with a ReLU fused into it (ops::conv2d_forward_relu).
enum class ConvDirection { Forward, ForwardRelu, BackwardData, BackwardFilter };

// InputError when `c` is OneDnn and this build has no oneDNN (libdnnl-dev was not found at configure time).
void set_cpu_conv(CpuConv c);
// The setting in force (Auto stays Auto).
CpuConv cpu_conv();
bool onednn_available();
// Whether a CPU convolution with input [N, C, H, W] `x` runs on oneDNN in direction `d` under the current setting.
bool conv_uses_onednn(ConvDirection d, const Shape& x);
// For `ringtrain info`: "oneDNN 2.6.3 (avx2 jit)", "im2col + OpenBLAS 0.3.21 ...", or for Auto which runs where;
// a build without oneDNN says so.
std::string cpu_conv_description();
// The precision of CPU convolutions and linear layers (train.cpu_precision). Bf16: a oneDNN convolution with at least
// kMinBf16Channels input channels reads its input, weights and output gradient as bfloat16 and accumulates and writes
// float32, and so does a linear layer's product with every dimension at least kMinOneDnnGemmDim (what
// torch.autocast("cpu", torch.bfloat16) does to both); weights, gradients, optimizer state and everything else stay
// float32. Process-wide, set after set_cpu_conv.
enum class CpuPrecision { Fp32, Bf16 };
// Below this many input channels bf16 lost to float32 (src/ops/cpu_conv.cpp has the measurements).
constexpr int64_t kMinBf16Channels = 6;
// Empty when this build and CPU can run bf16 convolutions, else why not (no oneDNN; no AVX512-BF16 or AMX).
std::string bf16_unavailable_reason();
// InputError when `p` is Bf16 and the build or CPU cannot run it, or train.cpu_conv is im2col. `min_channels` is
// the bf16 threshold (benchmarks lower it to time every layer both ways).
void set_cpu_precision(CpuPrecision p, int64_t min_channels = kMinBf16Channels);
CpuPrecision cpu_precision();
// Whether a oneDNN convolution with input [N, C, H, W] `x` runs in bf16 under the current setting.
bool conv_runs_bf16(const Shape& x);
// Below this many rows, columns or inner length a layer's product stays on OpenBLAS in float32 (a oneDNN call and
// bf16's conversions cost more than they save; src/ops/cpu_conv.cpp has the measurements).
constexpr int64_t kMinOneDnnGemmDim = 32;
// Whether ops::layer_gemm of [m x k] by [k x n] runs in bf16 under the current setting.
bool gemm_runs_bf16(int64_t m, int64_t k, int64_t n);
// Whether it runs on oneDNN's float32 matmul (train.cpu_conv onednn, or auto on a CPU with AVX-512) when not in bf16.
bool gemm_uses_onednn(int64_t m, int64_t k, int64_t n);
// For `ringtrain info`: the setting, and whether this CPU can run bf16.
std::string cpu_precision_description();
// For `ringtrain info`: what the CPU fuses around convolutions (the ReLU fusion of nn::Model; equal results).
std::string cpu_fusion_description();

}  // namespace ringtrain::ops

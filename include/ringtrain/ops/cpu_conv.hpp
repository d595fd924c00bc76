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
// For `ringtrain info`: what the CPU fuses around convolutions (the ReLU fusion of nn::Model; equal results).
std::string cpu_fusion_description();

}  // namespace ringtrain::ops

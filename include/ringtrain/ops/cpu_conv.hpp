// Which implementation runs CPU convolutions: oneDNN (the library PyTorch's CPU convolutions use; the CPU counterpart
// of cuDNN) or the project's own im2col + GEMM kernels (always built, the fallback). Process-wide like the intra-op
// thread count: set once from train.cpu_conv before the first step.
#pragma once

#include <string>

namespace ringtrain::ops {

enum class CpuConv { Auto, OneDnn, Im2col };

// InputError when `c` is OneDnn and this build has no oneDNN (libdnnl-dev was not found at configure time).
void set_cpu_conv(CpuConv c);
// The path convolutions take now: OneDnn or Im2col (Auto resolved by cpu_conv_auto_choice()).
CpuConv cpu_conv();
// What Auto picks on this CPU (see the rule in src/ops/cpu_conv.cpp).
CpuConv cpu_conv_auto_choice();
bool onednn_available();
// "oneDNN 2.6.3 (avx2 jit)" or "im2col + OpenBLAS 0.3.21 ..." for the path that runs now; when this build has no
// oneDNN the im2col line says so.
std::string cpu_conv_description();

}  // namespace ringtrain::ops

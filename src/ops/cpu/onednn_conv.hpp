// Private to src/ops: convolutions through oneDNN (built only when CMake found dnnl: RINGTRAIN_WITH_ONEDNN).
// Same contract as the im2col functions in cpu_ops.hpp (arguments already validated, plain NCHW / KCRS tensors);
// primitives, reorders and scratch buffers are made once per shape and kept in the caller's Workspace.
#pragma once

#include <cstddef>
#include <string>

#include "ringtrain/ops/ops.hpp"

namespace ringtrain::ops::cpu::onednn {

// With `relu`, y = max(conv + bias, 0) (a post-op of the same primitive).
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p,
                    Workspace& ws, bool relu = false);
// With `relu_x` (the convolution's input, a ReLU's output), dx is zeroed where relu_x <= 0: that ReLU's backward,
// done in the copy out of oneDNN's blocked layout.
void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p, Workspace& ws,
                          const Tensor* relu_x = nullptr);
void conv2d_backward_filter(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& dbias, const Conv2dParams& p,
                            Workspace& ws, bool accumulate);

// Convolution primitives created so far for the call site that owns `ws` (one per shape and direction; a test
// checks that steady-state steps create none).
size_t primitives_made(Workspace& ws);

// "oneDNN 2.6.3 (avx2 jit)": the library's version and the instruction set its JIT kernels use on this CPU.
std::string description();
// True where oneDNN's JIT has AVX-512 kernels on this CPU (its best case; see cpu_conv.cpp's auto rule).
bool has_avx512();
// True where oneDNN's JIT has bf16 kernels on this CPU (AVX512-BF16, or AMX): bf16 convolutions at full speed.
bool has_bf16();

}  // namespace ringtrain::ops::cpu::onednn

// Private to src/ops: a layer's matrix product through oneDNN's matmul (built only with oneDNN), for ops::layer_gemm:
// c = alpha op(a) op(b) + beta c with beta 0 or 1, c float32. With `bf16` (train.cpu_precision) op(a) and op(b) are
// read as bfloat16 and the products added in float32; else all float32 (oneDNN's AVX-512 kernels). The primitive and
// any reordered copies of the inputs are made once per shape and kept in the caller's Workspace.
#pragma once

#include "ringtrain/ops/ops.hpp"

namespace ringtrain::ops::cpu::onednn {

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta, bool bf16,
          Workspace& ws);

}  // namespace ringtrain::ops::cpu::onednn

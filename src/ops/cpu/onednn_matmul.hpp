// Private to src/ops: a layer's matrix product in bf16 through oneDNN's matmul (built only with oneDNN), for
// train.cpu_precision bf16 (ops::layer_gemm). op(a) and op(b) are read as bfloat16, the products added in float32
// and c written in float32 (c = alpha op(a) op(b) + beta c, beta 0 or 1). The primitive and the bf16 copies of the
// inputs are made once per shape and kept in the caller's Workspace.
#pragma once

#include "ringtrain/ops/ops.hpp"

namespace ringtrain::ops::cpu::onednn {

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta, bool bf16,
          Workspace& ws);

}  // namespace ringtrain::ops::cpu::onednn

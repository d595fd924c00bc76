// Intra-op thread count for CPU kernels (Eigen GEMM and OpenMP loops).
// Default is 1 per rank, since ranks already fill the cores.
#pragma once

namespace ringtrain::ops {

void set_intra_op_threads(int n);
int intra_op_threads();

}  // namespace ringtrain::ops

// Intra-op thread count for CPU kernels (GEMM library and OpenMP loops), and which GEMM library that is.
// Default is 1 per rank, since ranks already fill the cores.
#pragma once

#include <string>

namespace ringtrain::ops {

void set_intra_op_threads(int n);
int intra_op_threads();
// CPUs this process may run on (its affinity mask: 1 under mpirun --bind-to core or srun --cpu-bind with one CPU
// per task); falls back to the machine's count where the mask cannot be read.
int usable_cpus();
// "OpenBLAS 0.3.21 ..." or "Eigen 3.4.0": the CPU GEMM this build uses (for `ringtrain info` and summary.json).
std::string cpu_gemm_library();

}  // namespace ringtrain::ops

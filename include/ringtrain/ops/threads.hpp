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

// A DYNAMIC_ARCH OpenBLAS that does not know this CPU model runs its SSE3 ("Prescott") kernels: Debian's 0.3.21 on a
// 5th-generation Xeon runs SGEMM at 30 instead of 100 GFLOP/s, logistic regression at half speed (bench/RESULTS.md,
// "OpenBLAS on a CPU it does not know"). It picks its kernels when it loads, from OPENBLAS_CORETYPE. Where that is
// unset and the pick is such a fallback on a CPU with AVX2 or AVX-512, this sets it and starts the program again
// (execv of itself with the same arguments; call it first in main, before MPI or any thread starts). Returns where
// nothing is to be done or the restart failed (the run goes on with the kernels it has). A user's
// OPENBLAS_CORETYPE, whatever it says, is left alone.
void restart_with_openblas_kernels_for_this_cpu(char** argv);

}  // namespace ringtrain::ops

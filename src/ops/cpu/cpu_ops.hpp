// Private to src/ops: the CPU implementations behind ops.hpp. Arguments are already validated by the
// dispatch layer (shapes consistent, all tensors on the CPU); these functions only compute.
// Eigen is included only in the .cpp files of this folder.
#pragma once

#include <cstdint>

#include "ringtrain/ops/ops.hpp"

namespace ringtrain::ops::cpu {

// Row-major GEMM on raw pointers with leading dimensions: C[M,N] = alpha*op(A)*op(B) + beta*C,
// op(A) is [M,K] (A stored [K,M] when ta), op(B) is [K,N] (B stored [N,K] when tb). beta == 0 never reads C.
void gemm_raw(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// out[r] += sum of row r of the row-major [rows, cols] matrix m (vectorised).
void add_row_sums(const float* m, int64_t rows, int64_t cols, float* out);

// Applies the intra-op thread count to Eigen and OpenMP.
void apply_threads(int n);
// Applies the default (or the last set) thread count once, before the first Eigen product.
void ensure_threads_applied();

// Convolution tuning (for benchmarks): samples whose im2col columns are concatenated into one GEMM are
// chosen so that a GEMM has at least this many columns (1 → one GEMM per sample). 0 restores the default.
void set_conv_min_gemm_columns(int64_t columns);
int64_t conv_min_gemm_columns();

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta);
void bias_add(Tensor& y, const Tensor& bias);
void bias_grad(const Tensor& dy, Tensor& dbias, bool accumulate);

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p,
                    Workspace& ws);
void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p, Workspace& ws);
void conv2d_backward_filter(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& dbias, const Conv2dParams& p,
                            Workspace& ws, bool accumulate);

void maxpool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p);
void maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, const Pool2dParams& p);
void maxpool2d_backward_relu(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, const Pool2dParams& p);

void avgpool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p);
void avgpool2d_backward(const Tensor& dy, Tensor& dx, const Pool2dParams& p);
void global_avgpool_forward(const Tensor& x, Tensor& y);
void global_avgpool_backward(const Tensor& dy, Tensor& dx);
void batchnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& inv_std, Tensor& running_mean, Tensor& running_var, const BatchNormParams& p);
void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& inv_std, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool batch_stats,
                        bool accumulate);
// Synchronised BatchNorm (training only): the statistics of every rank's batch, summed through `across`.
void batchnorm_forward_across(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                              Tensor& inv_std, Tensor& running_mean, Tensor& running_var, const BatchNormParams& p,
                              const CrossRankSum& across);
void batchnorm_backward_across(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                               const Tensor& inv_std, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool accumulate,
                               const CrossRankSum& across);

void activation_forward(Activation a, const Tensor& x, Tensor& y);
void activation_backward(Activation a, const Tensor& y, const Tensor& dy, Tensor& dx);
void dropout_forward(const Tensor& x, Tensor& y, Tensor& mask, float p, Rng& rng);
void dropout_backward(const Tensor& dy, const Tensor& mask, Tensor& dx);

LossStats softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs);
void softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, Tensor& dlogits, float scale);
LossStats sigmoid_bce_forward(const Tensor& logits, const Tensor& targets, Tensor& probs);
void sigmoid_bce_backward(const Tensor& probs, const Tensor& targets, Tensor& dlogits, float scale);

void scale(Tensor& x, float alpha);
void axpy(float alpha, const Tensor& x, Tensor& y);
bool all_finite(const Tensor& x);
double sum_squares(const Tensor& x);
void sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, const SgdParams& p);
void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p);
void adadelta_update(Tensor& param, const Tensor& grad, Tensor& sq_avg, Tensor& acc_delta, const AdadeltaParams& p);

}  // namespace ringtrain::ops::cpu

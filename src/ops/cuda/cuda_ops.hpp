// Private to src/ops: the CUDA implementations behind ops.hpp, the same functions as cpu/cpu_ops.hpp (the dispatch
// in dispatch.hpp calls ops::cuda::name for tensors on Device::CUDA). Arguments are validated by the dispatch layer.
// GEMM: cuBLAS (full FP32). Convolution, max pooling and BatchNorm: cuDNN (convolution algorithms chosen once per shape with
// cudnnFind*, or cuDNN's heuristic ranking with RINGTRAIN_CUDNN_ALGO=heuristic; cached; TF32 tensor cores allowed
// as in PyTorch's default; workspace from the caching allocator).
// Everything else: own kernels in kernels.cu and image_kernels.cu. Everything runs on the legacy default stream; the
// ops that return a value to the host (losses, all_finite, sum_squares, synchronised BatchNorm's staged sums) wait
// for it.
#pragma once

#include <cstdint>

#include "ringtrain/ops/ops.hpp"

namespace ringtrain::ops::cuda {

void open_device_libraries();  // cuBLAS (cublas_library.cpp)

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

// Average pooling (padding counts in the divisor, as the CPU op) and global average pooling: own kernels
// (image_kernels.cu).
void avgpool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p);
void avgpool2d_backward(const Tensor& dy, Tensor& dx, const Pool2dParams& p);
void global_avgpool_forward(const Tensor& x, Tensor& y);
void global_avgpool_backward(const Tensor& dy, Tensor& dx);
// BatchNorm (batchnorm.cpp): training forward and backward through cuDNN (spatial mode on x as [N, C, S, 1]),
// evaluation forward through cuDNN's inference call, evaluation backward on own kernels (cuDNN's backward assumes
// batch statistics).
void batchnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& inv_std, Tensor& running_mean, Tensor& running_var, const BatchNormParams& p);
void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& inv_std, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool batch_stats,
                        bool accumulate);
// Synchronised BatchNorm (batchnorm_across.cpp, sync.batchnorm; training only): the CPU op's math on own kernels,
// the [C]-sized sums staged through the host for `across`.
void batchnorm_forward_across(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                              Tensor& inv_std, Tensor& running_mean, Tensor& running_var, const BatchNormParams& p,
                              const CrossRankSum& across);
void batchnorm_backward_across(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                               const Tensor& inv_std, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool accumulate,
                               const CrossRankSum& across);

void activation_forward(Activation a, const Tensor& x, Tensor& y);
void activation_backward(Activation a, const Tensor& y, const Tensor& dy, Tensor& dx);
// The mask comes from a counter-based hash of (one 64-bit seed drawn from rng, element index), dropout_keeps in
// core/hash.hpp: the same function as the CPU op's, so the same rng state gives the same mask on both devices.
void dropout_forward(const Tensor& x, Tensor& y, Tensor& mask, float p, Rng& rng);
void dropout_backward(const Tensor& dy, const Tensor& mask, Tensor& dx);

// Labels are checked on the device in the forward pass (InputError naming the first bad sample, as on the CPU);
// the backward pass trusts them.
LossStats softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs);
void softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, Tensor& dlogits, float scale);
LossStats sigmoid_bce_forward(const Tensor& logits, const Tensor& targets, Tensor& probs);
void sigmoid_bce_backward(const Tensor& probs, const Tensor& targets, Tensor& dlogits, float scale);
// Add the batch's loss sum, correct count and first bad row into `totals` (a kernels::ReduceResult on the device)
// without waiting: the host reads it later (ops::LossTotals::take).
void softmax_cross_entropy_accumulate(const Tensor& logits, const Tensor& labels, Tensor& probs, float* totals);
void sigmoid_bce_accumulate(const Tensor& logits, const Tensor& targets, Tensor& probs, float* totals);

void scale(Tensor& x, float alpha);
void axpy(float alpha, const Tensor& x, Tensor& y);
bool all_finite(const Tensor& x);
double sum_squares(const Tensor& x);
void sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, const SgdParams& p);
void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p);
void adadelta_update(Tensor& param, const Tensor& grad, Tensor& sq_avg, Tensor& acc_delta, const AdadeltaParams& p);

}  // namespace ringtrain::ops::cuda

// The math the layers and optimizers need: one free function per op, dispatched on the tensors' device.
// ops/cpu implements them with Eigen; ops/cuda with cuBLAS/cuDNN/own kernels. Layers call only these.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "ringtrain/core/rng.hpp"
#include "ringtrain/core/tensor.hpp"
#include "ringtrain/ops/workspace.hpp"

namespace ringtrain::ops {

// ---- device set-up -------------------------------------------------------------------------------
// Opens what the ops on `dev` load at run time rather than at process start (CUDA: cuBLAS, see
// src/ops/cuda/cublas_library.hpp), so that a missing library is an error at set-up naming it, not at the first
// step. Nothing to do for the CPU; Error for CUDA in a build without it.
void open_device_libraries(Device dev);

// ---- dense linear algebra ----------------------------------------------------------------------
// c = alpha * op(a) * op(b) + beta * c, all 2-D row-major; op(x) = x^T when the flag is set.
// c must already have the result shape [rows of op(a), cols of op(b)].
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha = 1.0f,
          float beta = 0.0f);
// A layer's product (nn::Linear): gemm, except on the CPU for a product whose dimensions are all at least
// kMinOneDnnGemmDim (ops/cpu_conv.hpp) with beta 0 or 1: under train.cpu_precision bf16 it reads op(a) and op(b) as
// bf16 (oneDNN matmul, float32 sums and result: torch.autocast's linear), and where train.cpu_conv puts it on oneDNN
// (auto: a CPU with AVX-512) it is oneDNN's float32 matmul. ws keeps those primitives.
void layer_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta,
                Workspace& ws);

// y[n, k, ...] += bias[k] for every n and trailing (spatial) position. y is [N, K] or [N, K, H, W].
void bias_add(Tensor& y, const Tensor& bias);
// dbias[k] (+)= sum over n and spatial positions of dy[n, k, ...].
void bias_grad(const Tensor& dy, Tensor& dbias, bool accumulate = false);

// ---- convolution (NCHW, weights KCRS, cross-correlation like cuDNN/PyTorch) ---------------------
struct Conv2dParams {
    int64_t stride_h = 1, stride_w = 1;
    int64_t pad_h = 0, pad_w = 0;
};
// Output shape [N, K, P, Q]; throws InputError when the kernel does not fit the padded input.
Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p);
// y = conv(x, w) + bias (bias may be an empty Tensor). y must have conv2d_output_shape.
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p,
                    Workspace& ws);
// dx = gradient of the loss w.r.t. x (overwritten).
void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p, Workspace& ws);
// dw (+)= gradient w.r.t. the weights; dbias (+)= sum of dy over N, P, Q (skipped if dbias is empty).
void conv2d_backward_filter(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& dbias, const Conv2dParams& p,
                            Workspace& ws, bool accumulate = false);

// A ReLU fused into the convolution next to it (a model's conv2d -> relu and relu -> conv2d on the CPU), equal to
// the unfused pair: y = max(conv(x, w) + bias, 0) with the ReLU as oneDNN's post-op (the separate pass otherwise);
// dx = conv2d_backward_data(dy) where x > 0 and 0 elsewhere, x being this convolution's input and a ReLU's output
// (so x > 0 is that ReLU's backward mask), applied while oneDNN's result is copied out of its blocked layout.
void conv2d_forward_relu(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p,
                         Workspace& ws);
void conv2d_backward_data_relu(const Tensor& dy, const Tensor& w, const Tensor& x, Tensor& dx, const Conv2dParams& p,
                               Workspace& ws);

// ---- pooling ------------------------------------------------------------------------------------
struct Pool2dParams {
    int64_t kernel_h = 2, kernel_w = 2;
    int64_t stride_h = 2, stride_w = 2;
    int64_t pad_h = 0, pad_w = 0;  // padded positions never win the max
};
Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p);
void maxpool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p);
// Routes dy to the first position (in row-major window order) that holds the max, as cuDNN and PyTorch do.
void maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, const Pool2dParams& p);
// maxpool2d_backward followed by the backward of the ReLU whose output x is (relu -> maxpool2d): a window's
// gradient reaches its first maximum only where that maximum, y, is > 0, which is exactly the ReLU's mask there.
void maxpool2d_backward_relu(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, const Pool2dParams& p);

// Average pooling over the same windows as max pooling. Padded positions count as zeros in the divisor
// (kernel_h * kernel_w, PyTorch's default count_include_pad=True).
void avgpool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p);
void avgpool2d_backward(const Tensor& dy, Tensor& dx, const Pool2dParams& p);
// Global average pooling: x [N, C, H, W] -> y [N, C] (the mean of each plane).
void global_avgpool_forward(const Tensor& x, Tensor& y);
void global_avgpool_backward(const Tensor& dy, Tensor& dx);

// ---- batch normalisation -------------------------------------------------------------------------
// x is [N, C] or [N, C, spatial...]; statistics are per channel C over N and the spatial positions (M values).
struct BatchNormParams {
    float momentum = 0.1f, eps = 1e-5f;
    bool training = true;  // batch statistics (and running-stat update) vs the running statistics
    bool relu = false;     // y = max(BatchNorm(x), 0): a ReLU after it, fused (CPU: in the same pass; CUDA: a pass after)
};
// Sums `values` element-wise over every rank taking part, in place; every rank calls it at the same point with the
// same length (synchronised BatchNorm: nn::BatchStatsReducer behind it). An empty function = this rank alone.
using CrossRankSum = std::function<void(std::span<double>)>;
// y = gamma * (x - mean) * inv_std + beta. Training: mean and inv_std = 1/sqrt(var + eps) from the batch (biased
// variance), written to `mean`/`inv_std` [C] for backward, and running = (1 - momentum) * running + momentum * stat
// with the unbiased variance (PyTorch); needs M >= 2. Evaluation: mean/inv_std are set from the running stats.
// With `across` (training only; on CUDA own kernels replace cuDNN, the [C]-sized sums staged through the host) the
// batch is every rank's batch together, M included: two passes, each summed across ranks in double (the per-channel
// sums and the count, then the squares about that global mean), so the variance never comes from a difference of
// large sums.
void batchnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& inv_std, Tensor& running_mean, Tensor& running_var, const BatchNormParams& p,
                       const CrossRankSum& across = {});
// dgamma (+)= sum dy * xhat, dbeta (+)= sum dy (this rank's batch: the gradient sync adds the ranks' shares);
// dx (skipped when empty) is overwritten. batch_stats says whether mean/inv_std came from this batch (training:
// they depend on x) or from the running stats (evaluation). With `across` and batch_stats, dx uses sum(dy) and
// sum(dy * xhat) over every rank's batch (one cross-rank sum of 2C+1 doubles, skipped when dx is empty).
void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& inv_std, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool batch_stats,
                        bool accumulate = false, const CrossRankSum& across = {});

// ---- elementwise activations ---------------------------------------------------------------------
enum class Activation { ReLU, Sigmoid, Tanh };
void activation_forward(Activation a, const Tensor& x, Tensor& y);
// Uses the forward output y (relu: y > 0; sigmoid: y(1-y); tanh: 1-y^2). dx may alias dy.
void activation_backward(Activation a, const Tensor& y, const Tensor& dy, Tensor& dx);

// ---- dropout (inverted: kept values are scaled by 1/(1-p) at training time) ---------------------
// mask gets 0 or 1/(1-p) per element, drawn from rng; y = x * mask.
void dropout_forward(const Tensor& x, Tensor& y, Tensor& mask, float p, Rng& rng);
void dropout_backward(const Tensor& dy, const Tensor& mask, Tensor& dx);

// ---- losses --------------------------------------------------------------------------------------
struct LossStats {
    double loss_sum = 0.0;  // sum over the batch of per-sample losses (not the mean)
    int64_t correct = 0;    // samples whose prediction matches the label
};
// logits [N, K]; labels [N] holding class indices as floats. probs [N, K] gets the softmax.
// Numerically stable (max subtracted). Throws InputError for a label outside [0, K).
LossStats softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs);
// dlogits = (probs - onehot(labels)) * scale (scale is usually 1/global batch).
void softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, Tensor& dlogits, float scale);
// logits [N] or [N, 1]; targets [N] in {0, 1}. probs gets sigmoid(logits). Stable for large |logit|.
LossStats sigmoid_bce_forward(const Tensor& logits, const Tensor& targets, Tensor& probs);

// Running loss totals kept where the logits are, so that a GPU training step need not wait for its loss: the
// accumulating forwards below add into them with no host round trip, and take() reads them (on a GPU: waits for the
// work queued so far) and starts again from zero. On the CPU the forward adds on the host and checks labels at once;
// on a GPU a bad label or target is reported by take(), naming the first bad sample's row in its batch.
class LossTotals {
public:
    LossStats take();
    // Anything added since the last take().
    bool pending() const { return host_pending_ || device_pending_; }

    // For the ops: a host-side contribution, and the device-side totals on `device` (made on first use) that a CUDA
    // forward adds into; `bad_input` is the start of take()'s message if that forward meets a bad label.
    void add(const LossStats& s);
    float* device_totals(Device device, const std::string& bad_input);

private:
    LossStats host_;
    Tensor device_;  // the kernels' result record: double sum, uint64 correct, uint64 first bad row (~0: none)
    bool host_pending_ = false, device_pending_ = false;
    std::string bad_input_;
};
void softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs, LossTotals& totals);
void sigmoid_bce_forward(const Tensor& logits, const Tensor& targets, Tensor& probs, LossTotals& totals);
void sigmoid_bce_backward(const Tensor& probs, const Tensor& targets, Tensor& dlogits, float scale);

// ---- vector ops for optimizers and gradient handling ---------------------------------------------
void scale(Tensor& x, float alpha);                        // x *= alpha
void axpy(float alpha, const Tensor& x, Tensor& y);         // y += alpha * x
// True if every element is finite.
bool all_finite(const Tensor& x);
double sum_squares(const Tensor& x);

struct SgdParams {
    float lr = 0.01f, momentum = 0.0f, weight_decay = 0.0f;
    bool nesterov = false;
};
// PyTorch semantics: g = grad + wd*param; v = momentum*v + g; step = nesterov ? g + momentum*v : v;
// param -= lr * step. With momentum == 0, velocity is untouched.
void sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, const SgdParams& p);

struct AdamParams {
    float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
    int64_t step = 1;  // 1-based step count for bias correction
};
// PyTorch Adam (L2 weight decay added to the gradient).
void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p);

struct AdadeltaParams {
    float lr = 1.0f, rho = 0.9f, eps = 1e-6f, weight_decay = 0.0f;
};
// PyTorch Adadelta: sq = rho*sq + (1-rho)g^2; d = sqrt(acc+eps)/sqrt(sq+eps)*g; acc = rho*acc + (1-rho)d^2;
// param -= lr*d.
void adadelta_update(Tensor& param, const Tensor& grad, Tensor& sq_avg, Tensor& acc_delta, const AdadeltaParams& p);

}  // namespace ringtrain::ops

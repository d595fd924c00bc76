// CUDA batch normalisation through cuDNN. x is [N, C, S] (S = the spatial positions, 1 for batchnorm1d on [N, C]),
// described to cuDNN as N x C x S x 1 in spatial mode: statistics per channel over N and S. That is PyTorch's
// batchnorm2d, and for batchnorm1d on [N, C] the same statistics as the per-activation mode PyTorch uses there (one
// value per channel over N). cuDNN's training call matches our CPU op: biased variance to normalise, the unbiased one
// into running_var, momentum as the exponential average factor, and saves mean and 1/sqrt(var + eps) for backward.
#include <cudnn.h>

#include <memory>
#include <string>

#include "cuda_ops.hpp"
#include "cudnn_handle.hpp"
#include "image_kernels.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"

namespace ringtrain::ops::cuda {

namespace {

void check(cudnnStatus_t s, const char* call) {
    if (s != CUDNN_STATUS_SUCCESS)
        throw Error(std::string("cuDNN call ") + call + " failed: " + cudnnGetErrorString(s) + " (status " +
                    std::to_string(static_cast<int>(s)) + ")");
}
#define RT_BN_CUDNN(expr) check((expr), #expr)

// The descriptors of one call: x (and y, dx, dy) as N x C x S x 1, and the derived 1 x C x 1 x 1 channel tensor.
struct BnDescs {
    cudnnTensorDescriptor_t x = nullptr, channel = nullptr;
    explicit BnDescs(const Tensor& xt) {
        const int64_t n = xt.dim(0), c = xt.dim(1), s = xt.numel() / (n * c);
        RT_BN_CUDNN(cudnnCreateTensorDescriptor(&x));
        RT_BN_CUDNN(cudnnCreateTensorDescriptor(&channel));
        RT_BN_CUDNN(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(n),
                                               static_cast<int>(c), static_cast<int>(s), 1));
        RT_BN_CUDNN(cudnnDeriveBNTensorDescriptor(channel, x, CUDNN_BATCHNORM_SPATIAL));
    }
    ~BnDescs() {
        cudnnDestroyTensorDescriptor(channel);
        cudnnDestroyTensorDescriptor(x);
    }
    BnDescs(const BnDescs&) = delete;
    BnDescs& operator=(const BnDescs&) = delete;
};

double checked_eps(float eps) {
    if (static_cast<double>(eps) < CUDNN_BN_MIN_EPSILON)
        throw InputError("batchnorm: eps " + std::to_string(eps) + " is below cuDNN's minimum " +
                         std::to_string(CUDNN_BN_MIN_EPSILON) + "; raise the layer's eps");
    return static_cast<double>(eps);
}

}  // namespace

void batchnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& inv_std, Tensor& running_mean, Tensor& running_var, const BatchNormParams& p) {
    if (x.empty()) return;
    const BnDescs d(x);
    const float one = 1.0f, zero = 0.0f;
    const double eps = checked_eps(p.eps);
    if (p.training) {
        RT_BN_CUDNN(cudnnBatchNormalizationForwardTraining(
            cudnn_handle(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, x.data(), d.x, y.data(), d.channel,
            gamma.data(), beta.data(), static_cast<double>(p.momentum), running_mean.data(), running_var.data(), eps,
            mean.data(), inv_std.data()));
        return;
    }
    // Evaluation: the running stats normalise; mean/inv_std are set from them for an evaluation-mode backward.
    cuda_check(kernels::batchnorm_eval_stats(running_mean.data(), running_var.data(), mean.data(), inv_std.data(),
                                             x.dim(1), p.eps),
               "batchnorm_eval_stats kernel");
    RT_BN_CUDNN(cudnnBatchNormalizationForwardInference(cudnn_handle(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x,
                                                        x.data(), d.x, y.data(), d.channel, gamma.data(), beta.data(),
                                                        running_mean.data(), running_var.data(), eps));
}

void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& inv_std, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool batch_stats,
                        bool accumulate) {
    const int64_t n = x.dim(0), c = x.dim(1), s = x.empty() ? 0 : x.numel() / (n * c);
    if (!batch_stats) {
        cuda_check(kernels::batchnorm_eval_backward(x.data(), dy.data(), gamma.data(), mean.data(), inv_std.data(),
                                                    dx.empty() ? nullptr : dx.data(), dgamma.data(), dbeta.data(), n,
                                                    c, s, accumulate),
                   "batchnorm_eval_backward kernel");
        return;
    }
    if (x.empty()) return;
    const BnDescs d(x);
    // cuDNN always writes dx: a layer whose input needs no gradient gets a scratch block (from the caching allocator).
    std::shared_ptr<float> scratch;
    float* pdx = dx.empty() ? (scratch = allocate_floats(static_cast<size_t>(x.numel()), Device::CUDA)).get()
                            : dx.data();
    const float one = 1.0f, zero = 0.0f, param_beta = accumulate ? 1.0f : 0.0f;
    // With the saved statistics cuDNN does not use epsilon (inv_std holds it already); it only checks the minimum.
    RT_BN_CUDNN(cudnnBatchNormalizationBackward(cudnn_handle(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one,
                                                &param_beta, d.x, x.data(), d.x, dy.data(), d.x, pdx, d.channel,
                                                gamma.data(), dgamma.data(), dbeta.data(), CUDNN_BN_MIN_EPSILON,
                                                mean.data(), inv_std.data()));
}

}  // namespace ringtrain::ops::cuda

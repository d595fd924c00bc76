// Shape checks and device dispatch for batch normalisation. The synchronised form (a CrossRankSum given) has its own
// op on each device: cpu::batchnorm_*_across, and on CUDA own kernels instead of cuDNN (cuda/batchnorm_across.cpp).
#include "dispatch.hpp"
#include "ringtrain/ops/ops.hpp"

namespace ringtrain::ops {

using detail::require;

namespace {
bool is_channel_vector(const Tensor& t, int64_t c) { return t.ndim() == 1 && t.dim(0) == c; }
}  // namespace

void batchnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& inv_std, Tensor& running_mean, Tensor& running_var, const BatchNormParams& p,
                       const CrossRankSum& across) {
    require(x.ndim() >= 2 && y.shape() == x.shape(), "batchnorm_forward", "x must be [N,C,...] and y its shape",
            {{"x", &x}, {"y", &y}});
    const int64_t c = x.dim(1);
    require(is_channel_vector(gamma, c) && is_channel_vector(beta, c) && is_channel_vector(mean, c) &&
                is_channel_vector(inv_std, c) && is_channel_vector(running_mean, c) &&
                is_channel_vector(running_var, c),
            "batchnorm_forward", "gamma, beta, mean, inv_std and the running stats must be [C]",
            {{"x", &x}, {"gamma", &gamma}, {"beta", &beta}, {"mean", &mean}, {"running_mean", &running_mean}});
    const bool synchronised = p.training && across;
    // Synchronised, the count that matters is every rank's together (checked after it is summed).
    if (p.training && !synchronised && x.numel() / c < 2)
        throw InputError("batchnorm: training needs more than one value per channel (batch " +
                         std::to_string(x.dim(0)) + ", x=" + shape_string(x.shape()) +
                         "); use a larger batch per rank");
    const Device dev = detail::device_of("batchnorm_forward",
                                         {&x, &gamma, &beta, &y, &mean, &inv_std, &running_mean, &running_var});
    if (p.relu && dev != Device::CPU) {  // cuDNN's forward has no ReLU epilogue here: the ReLU as its own pass
        BatchNormParams plain = p;
        plain.relu = false;
        batchnorm_forward(x, gamma, beta, y, mean, inv_std, running_mean, running_var, plain, across);
        return activation_forward(Activation::ReLU, y, y);
    }
    if (synchronised) {
        RT_DISPATCH(dev, batchnorm_forward_across, x, gamma, beta, y, mean, inv_std, running_mean, running_var, p,
                    across);
    }
    RT_DISPATCH(dev, batchnorm_forward, x, gamma, beta, y, mean, inv_std, running_mean, running_var, p);
}

void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& inv_std, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool batch_stats,
                        bool accumulate, const CrossRankSum& across) {
    require(x.ndim() >= 2 && dy.shape() == x.shape() && (dx.empty() || dx.shape() == x.shape()),
            "batchnorm_backward", "dy and dx (unless empty) must have the shape of x [N,C,...]",
            {{"x", &x}, {"dy", &dy}, {"dx", &dx}});
    const int64_t c = x.dim(1);
    require(is_channel_vector(gamma, c) && is_channel_vector(mean, c) && is_channel_vector(inv_std, c) &&
                is_channel_vector(dgamma, c) && is_channel_vector(dbeta, c),
            "batchnorm_backward", "gamma, mean, inv_std, dgamma and dbeta must be [C]",
            {{"x", &x}, {"gamma", &gamma}, {"dgamma", &dgamma}, {"dbeta", &dbeta}});
    const Device dev =
        detail::device_of("batchnorm_backward", {&x, &dy, &gamma, &mean, &inv_std, &dx, &dgamma, &dbeta});
    if (batch_stats && across) {
        RT_DISPATCH(dev, batchnorm_backward_across, x, dy, gamma, mean, inv_std, dx, dgamma, dbeta, accumulate,
                    across);
    }
    RT_DISPATCH(dev, batchnorm_backward, x, dy, gamma, mean, inv_std, dx, dgamma, dbeta, batch_stats, accumulate);
}

}  // namespace ringtrain::ops

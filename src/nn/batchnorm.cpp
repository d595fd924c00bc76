// BatchNorm1d/2d (PyTorch semantics; per-rank batch statistics, or every rank's with a BatchStatsReducer). The math
// is in ops::batchnorm_*.
#include <algorithm>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain::nn {

BatchNorm::BatchNorm(int spatial_dims, float momentum, float eps) : spatial_dims_(spatial_dims) {
    if (spatial_dims != 1 && spatial_dims != 2) throw Error("BatchNorm: spatial_dims must be 1 or 2");
    if (!(momentum >= 0.0f && momentum <= 1.0f) || !(eps > 0.0f))
        throw InputError("batchnorm: need momentum in [0, 1] and eps > 0");
    p_.momentum = momentum;
    p_.eps = eps;
}

Shape BatchNorm::output_shape(const Shape& input) const {
    const bool ok = spatial_dims_ == 2 ? input.size() == 3 : (input.size() == 1 || input.size() == 2);
    if (!ok)
        throw InputError("layer " + name() + " (" + type() + ") needs " +
                         (spatial_dims_ == 2 ? std::string("a [channels, height, width]")
                                             : std::string("a [features] or [channels, length]")) +
                         " input but gets " + shape_string(input) +
                         (spatial_dims_ == 2 ? "; use batchnorm1d after a linear layer" : "; use batchnorm2d after conv2d"));
    return input;
}

void BatchNorm::build(const Shape& input, Rng&) {
    const int64_t c = input.at(0);
    gamma_ = {name() + ".weight", Tensor::filled({c}, 1.0f), Tensor::zeros({c})};
    beta_ = {name() + ".bias", Tensor::zeros({c}), Tensor::zeros({c})};
    running_mean_ = {name() + ".running_mean", Tensor::zeros({c}), Tensor()};
    running_var_ = {name() + ".running_var", Tensor::filled({c}, 1.0f), Tensor()};
    mean_ = Tensor::zeros({c});
    inv_std_ = Tensor::zeros({c});
}

Tensor BatchNorm::as_channels(const Tensor& t) const {
    const int64_t n = t.dim(0), c = t.dim(1);
    return t.reshape({n, c, t.numel() / std::max<int64_t>(n * c, 1)});
}

ops::CrossRankSum BatchNorm::across() const {
    if (!reducer_) return {};
    return [r = reducer_](std::span<double> values) { r->sum(values); };
}

void BatchNorm::forward(const Tensor& x, Tensor& y, const ForwardContext& ctx) {
    y.resize(x.shape(), x.device());
    if (mean_.device() != x.device()) {  // built on the CPU; the model may have moved to a GPU since
        mean_ = Tensor::zeros(mean_.shape(), x.device());
        inv_std_ = Tensor::zeros(inv_std_.shape(), x.device());
    }
    last_training_ = ctx.training;
    ops::BatchNormParams p = p_;
    p.training = ctx.training;
    Tensor yv = as_channels(y);
    try {
        ops::batchnorm_forward(as_channels(x), gamma_.value, beta_.value, yv, mean_, inv_std_, running_mean_.value,
                               running_var_.value, p, across());
    } catch (const InputError& e) {
        throw InputError("layer " + name() + " (" + type() + "): " + e.what());
    }
}

void BatchNorm::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx, bool accumulate) {
    Tensor dxv;
    if (dx) {
        dx->resize(x.shape(), x.device());
        dxv = as_channels(*dx);
    }
    ops::batchnorm_backward(as_channels(x), as_channels(dy), gamma_.value, mean_, inv_std_, dxv, gamma_.grad,
                            beta_.grad, last_training_, accumulate, across());
}

}  // namespace ringtrain::nn

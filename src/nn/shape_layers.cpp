// Layers without parameters: pooling, activations, dropout, flatten.
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain::nn {

Shape MaxPool2d::output_shape(const Shape& input) const {
    if (input.size() != 3)
        throw InputError("layer " + name() + " (maxpool2d) needs a [channels, height, width] input but gets " +
                         shape_string(input));
    Shape y;
    try {
        y = ops::pool2d_output_shape({1, input[0], input[1], input[2]}, p_);
    } catch (const Error& e) {
        throw InputError("layer " + name() + " (maxpool2d): " + e.what());
    }
    return {y[1], y[2], y[3]};
}

void MaxPool2d::forward(const Tensor& x, Tensor& y, const ForwardContext&) {
    y.resize(ops::pool2d_output_shape(x.shape(), p_), x.device());
    ops::maxpool2d_forward(x, y, p_);
}

void MaxPool2d::backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, bool) {
    if (!dx) return;
    dx->resize(x.shape(), x.device());
    if (relu_in_) ops::maxpool2d_backward_relu(x, y, dy, *dx, p_);
    else ops::maxpool2d_backward(x, y, dy, *dx, p_);
}

std::string ActivationLayer::type() const {
    switch (a_) {
        case ops::Activation::ReLU: return "relu";
        case ops::Activation::Sigmoid: return "sigmoid";
        case ops::Activation::Tanh: return "tanh";
    }
    return "activation";
}

void ActivationLayer::forward(const Tensor& x, Tensor& y, const ForwardContext&) {
    y.resize(x.shape(), x.device());
    ops::activation_forward(a_, x, y);
}

void ActivationLayer::backward(const Tensor&, const Tensor& y, const Tensor& dy, Tensor* dx, bool) {
    if (!dx) return;
    dx->resize(y.shape(), y.device());
    ops::activation_backward(a_, y, dy, *dx);
}

Dropout::Dropout(float p) : p_(p) {
    if (!(p >= 0.0f && p < 1.0f))
        throw InputError("dropout probability must be in [0, 1), got " + std::to_string(p));
}

void Dropout::forward(const Tensor& x, Tensor& y, const ForwardContext& ctx) {
    y.resize(x.shape(), x.device());
    last_training_ = ctx.training && p_ > 0.0f;
    if (!last_training_) {
        y.copy_from(x);
        return;
    }
    check(ctx.rng != nullptr, "dropout layer " + name() + " needs an Rng in training mode");
    mask_.resize(x.shape(), x.device());
    ops::dropout_forward(x, y, mask_, p_, *ctx.rng);
}

void Dropout::backward(const Tensor&, const Tensor&, const Tensor& dy, Tensor* dx, bool) {
    if (!dx) return;
    dx->resize(dy.shape(), dy.device());
    if (last_training_)
        ops::dropout_backward(dy, mask_, *dx);
    else
        dx->copy_from(dy);
}

void Flatten::forward(const Tensor& x, Tensor& y, const ForwardContext&) {
    // A view: flatten copies nothing.
    y = x.reshape({x.dim(0), x.numel() / std::max<int64_t>(x.dim(0), 1)});
}

void Flatten::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx, bool) {
    if (dx) *dx = dy.reshape(x.shape());
}

}  // namespace ringtrain::nn

// Average pooling layers: AvgPool2d (windows as MaxPool2d) and GlobalAvgPool ([C, H, W] -> [C]).
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain::nn {

Shape AvgPool2d::output_shape(const Shape& input) const {
    if (input.size() != 3)
        throw InputError("layer " + name() + " (avgpool2d) needs a [channels, height, width] input but gets " +
                         shape_string(input));
    Shape y;
    try {
        y = ops::pool2d_output_shape({1, input[0], input[1], input[2]}, p_);
    } catch (const Error& e) {
        throw InputError("layer " + name() + " (avgpool2d): " + e.what());
    }
    return {y[1], y[2], y[3]};
}

void AvgPool2d::forward(const Tensor& x, Tensor& y, const ForwardContext&) {
    y.resize(ops::pool2d_output_shape(x.shape(), p_), x.device());
    ops::avgpool2d_forward(x, y, p_);
}

void AvgPool2d::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx, bool) {
    if (!dx) return;
    dx->resize(x.shape(), x.device());
    ops::avgpool2d_backward(dy, *dx, p_);
}

Shape GlobalAvgPool::output_shape(const Shape& input) const {
    if (input.size() != 3)
        throw InputError("layer " + name() + " (global_avgpool) needs a [channels, height, width] input but gets " +
                         shape_string(input));
    return {input[0]};
}

void GlobalAvgPool::forward(const Tensor& x, Tensor& y, const ForwardContext&) {
    y.resize({x.dim(0), x.dim(1)}, x.device());
    ops::global_avgpool_forward(x, y);
}

void GlobalAvgPool::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx, bool) {
    if (!dx) return;
    dx->resize(x.shape(), x.device());
    ops::global_avgpool_backward(dy, *dx);
}

}  // namespace ringtrain::nn

#include "init.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain::nn {

Shape Conv2d::output_shape(const Shape& input) const {
    if (input.size() != 3)
        throw InputError("layer " + name() + " (conv2d) needs a [channels, height, width] input but gets " +
                         shape_string(input));
    Shape x{1, input[0], input[1], input[2]};
    Shape y;
    try {
        y = ops::conv2d_output_shape(x, {out_, input[0], kh_, kw_}, p_);
    } catch (const Error& e) {
        throw InputError("layer " + name() + " (conv2d): " + e.what());
    }
    return {y[1], y[2], y[3]};
}

void Conv2d::build(const Shape& input, Rng& rng) {
    in_ = input.at(0);
    const int64_t fan_in = in_ * kh_ * kw_;
    weight_ = {name() + ".weight", Tensor({out_, in_, kh_, kw_}), Tensor::zeros({out_, in_, kh_, kw_})};
    detail::uniform_fan_in(weight_.value, fan_in, rng);
    if (has_bias_) {
        bias_ = {name() + ".bias", Tensor({out_}), Tensor::zeros({out_})};
        detail::uniform_fan_in(bias_.value, fan_in, rng);
    }
}

void Conv2d::forward(const Tensor& x, Tensor& y, const ForwardContext&) {
    y.resize(ops::conv2d_output_shape(x.shape(), weight_.value.shape(), p_), x.device());
    const Tensor no_bias;
    if (relu_out_) ops::conv2d_forward_relu(x, weight_.value, has_bias_ ? bias_.value : no_bias, y, p_, ws_);
    else ops::conv2d_forward(x, weight_.value, has_bias_ ? bias_.value : no_bias, y, p_, ws_);
}

void Conv2d::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx, bool accumulate) {
    Tensor no_bias;
    ops::conv2d_backward_filter(x, dy, weight_.grad, has_bias_ ? bias_.grad : no_bias, p_, ws_, accumulate);
    if (dx) {
        dx->resize(x.shape(), x.device());
        if (relu_in_) ops::conv2d_backward_data_relu(dy, weight_.value, x, *dx, p_, ws_);
        else ops::conv2d_backward_data(dy, weight_.value, *dx, p_, ws_);
    }
}

std::vector<Parameter*> Conv2d::parameters() {
    if (has_bias_) return {&weight_, &bias_};
    return {&weight_};
}

}  // namespace ringtrain::nn

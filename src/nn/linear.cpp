#include "init.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain::nn {

Shape Linear::output_shape(const Shape& input) const {
    if (input.size() != 1)
        throw InputError("layer " + name() + " (linear) needs a flat input but gets " + shape_string(input) +
                         "; put a flatten layer before it");
    return {out_};
}

void Linear::build(const Shape& input, Rng& rng) {
    in_ = input.at(0);
    weight_ = {name() + ".weight", Tensor({out_, in_}), Tensor::zeros({out_, in_})};
    detail::uniform_fan_in(weight_.value, in_, rng);
    if (has_bias_) {
        bias_ = {name() + ".bias", Tensor({out_}), Tensor::zeros({out_})};
        detail::uniform_fan_in(bias_.value, in_, rng);
    }
}

void Linear::forward(const Tensor& x, Tensor& y, const ForwardContext&) {
    const int64_t n = x.dim(0);
    y.resize({n, out_}, x.device());
    Tensor x2 = x.reshape({n, in_});
    ops::layer_gemm(x2, false, weight_.value, true, y, 1.0f, 0.0f, ws_);  // y = x W^T
    if (has_bias_) ops::bias_add(y, bias_.value);
}

void Linear::backward(const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx, bool accumulate) {
    const int64_t n = x.dim(0);
    Tensor x2 = x.reshape({n, in_});
    ops::layer_gemm(dy, true, x2, false, weight_.grad, 1.0f, accumulate ? 1.0f : 0.0f, ws_);  // dW = dy^T x
    if (has_bias_) ops::bias_grad(dy, bias_.grad, accumulate);
    if (dx) {
        dx->resize(x.shape(), x.device());
        Tensor dx2 = dx->reshape({n, in_});
        ops::layer_gemm(dy, false, weight_.value, false, dx2, 1.0f, 0.0f, ws_);  // dx = dy W
    }
}

std::vector<Parameter*> Linear::parameters() {
    if (has_bias_) return {&weight_, &bias_};
    return {&weight_};
}

}  // namespace ringtrain::nn

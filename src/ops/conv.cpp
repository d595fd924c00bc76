// Dispatch and shape rules for convolution and pooling.
#include "dispatch.hpp"
#include "ringtrain/ops/cpu_conv.hpp"
#include "ringtrain/ops/ops.hpp"
#ifdef RINGTRAIN_WITH_ONEDNN
#include "cpu/onednn_conv.hpp"
#endif

namespace ringtrain::ops {

using detail::require;
using detail::require_shape;

namespace {
void check_conv_params(const Conv2dParams& p) {
    if (p.stride_h < 1 || p.stride_w < 1 || p.pad_h < 0 || p.pad_w < 0)
        throw InputError("conv2d: stride must be >= 1 and padding >= 0, got stride " + std::to_string(p.stride_h) +
                         "x" + std::to_string(p.stride_w) + " padding " + std::to_string(p.pad_h) + "x" +
                         std::to_string(p.pad_w));
}

// CPU convolutions run on oneDNN where train.cpu_conv says so for this shape and direction (ops/cpu_conv.hpp);
// empty tensors always take the im2col kernels, which define the zero-sample case (a zero filter gradient).
#ifdef RINGTRAIN_WITH_ONEDNN
bool use_onednn(Device dev, ConvDirection d, const Tensor& x, std::initializer_list<const Tensor*> ts) {
    if (dev != Device::CPU || !conv_uses_onednn(d, x.shape())) return false;
    for (const Tensor* t : ts)
        if (t->numel() == 0) return false;
    return true;
}
#endif
}  // namespace

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p) {
    if (x.size() != 4 || w.size() != 4)
        throw Error("conv2d: x must be [N,C,H,W] and w [K,C,R,S]; got x=" + shape_string(x) + " w=" + shape_string(w));
    if (x[1] != w[1])
        throw Error("conv2d: input channels of x and w differ; got x=" + shape_string(x) + " w=" + shape_string(w));
    check_conv_params(p);
    const int64_t hp = x[2] + 2 * p.pad_h, wp = x[3] + 2 * p.pad_w;
    if (w[2] < 1 || w[3] < 1 || w[2] > hp || w[3] > wp)
        throw InputError("conv2d: kernel " + std::to_string(w[2]) + "x" + std::to_string(w[3]) +
                         " does not fit the padded input " + std::to_string(hp) + "x" + std::to_string(wp) +
                         " (x=" + shape_string(x) + ", padding " + std::to_string(p.pad_h) + "x" +
                         std::to_string(p.pad_w) + ")");
    return {x[0], w[0], (hp - w[2]) / p.stride_h + 1, (wp - w[3]) / p.stride_w + 1};
}

namespace {
// With `relu`: max(conv + bias, 0), fused on oneDNN, a pass over y otherwise (any device).
void forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p, Workspace& ws,
             bool relu) {
    const Shape out = conv2d_output_shape(x.shape(), w.shape(), p);
    require_shape(y, out, "conv2d_forward", "y", {{"x", &x}, {"w", &w}, {"y", &y}});
    require(bias.empty() || (bias.ndim() == 1 && bias.dim(0) == w.dim(0)), "conv2d_forward",
            "bias must be empty or [K]", {{"w", &w}, {"bias", &bias}});
    const Device dev = detail::device_of("conv2d_forward", {&x, &w, &bias, &y});
#ifdef RINGTRAIN_WITH_ONEDNN
    if (use_onednn(dev, relu ? ConvDirection::ForwardRelu : ConvDirection::Forward, x, {&x, &w, &y}))
        return cpu::onednn::conv2d_forward(x, w, bias, y, p, ws, relu);
#endif
    if (dev == Device::CPU) cpu::conv2d_forward(x, w, bias, y, p, ws);
    else RT_CUDA_CALL(conv2d_forward, x, w, bias, y, p, ws);
    if (relu) activation_forward(Activation::ReLU, y, y);
}

// With `relu_x` (this convolution's input, a ReLU's output): dx where relu_x > 0, else 0.
void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p, Workspace& ws,
                   const Tensor* relu_x) {
    const Shape out = conv2d_output_shape(dx.shape(), w.shape(), p);
    require_shape(dy, out, "conv2d_backward_data", "dy", {{"dy", &dy}, {"w", &w}, {"dx", &dx}});
    if (relu_x) require_shape(*relu_x, dx.shape(), "conv2d_backward_data_relu", "x", {{"x", relu_x}, {"dx", &dx}});
    const Device dev = detail::device_of("conv2d_backward_data", {&dy, &w, &dx, relu_x});
#ifdef RINGTRAIN_WITH_ONEDNN
    if (use_onednn(dev, ConvDirection::BackwardData, dx, {&dy, &w, &dx}))
        return cpu::onednn::conv2d_backward_data(dy, w, dx, p, ws, relu_x);
#endif
    if (dev == Device::CPU) cpu::conv2d_backward_data(dy, w, dx, p, ws);
    else RT_CUDA_CALL(conv2d_backward_data, dy, w, dx, p, ws);
    if (relu_x) activation_backward(Activation::ReLU, *relu_x, dx, dx);
}
}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p,
                    Workspace& ws) {
    forward(x, w, bias, y, p, ws, false);
}

void conv2d_forward_relu(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p,
                         Workspace& ws) {
    forward(x, w, bias, y, p, ws, true);
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p, Workspace& ws) {
    backward_data(dy, w, dx, p, ws, nullptr);
}

void conv2d_backward_data_relu(const Tensor& dy, const Tensor& w, const Tensor& x, Tensor& dx, const Conv2dParams& p,
                               Workspace& ws) {
    backward_data(dy, w, dx, p, ws, &x);
}

void conv2d_backward_filter(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& dbias, const Conv2dParams& p,
                            Workspace& ws, bool accumulate) {
    const Shape out = conv2d_output_shape(x.shape(), dw.shape(), p);
    require_shape(dy, out, "conv2d_backward_filter", "dy",
            {{"x", &x}, {"dy", &dy}, {"dw", &dw}});
    require(dbias.empty() || (dbias.ndim() == 1 && dbias.dim(0) == dw.dim(0)), "conv2d_backward_filter",
            "dbias must be empty or [K]", {{"dw", &dw}, {"dbias", &dbias}});
    const Device dev = detail::device_of("conv2d_backward_filter", {&x, &dy, &dw, &dbias});
#ifdef RINGTRAIN_WITH_ONEDNN
    if (use_onednn(dev, ConvDirection::BackwardFilter, x, {&x, &dy, &dw}))
        return cpu::onednn::conv2d_backward_filter(x, dy, dw, dbias, p, ws, accumulate);
#endif
    RT_DISPATCH(dev, conv2d_backward_filter, x, dy, dw, dbias, p, ws, accumulate);
}

Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p) {
    if (x.size() != 4) throw Error("pool2d: x must be [N,C,H,W]; got " + shape_string(x));
    if (p.kernel_h < 1 || p.kernel_w < 1 || p.stride_h < 1 || p.stride_w < 1 || p.pad_h < 0 || p.pad_w < 0 ||
        2 * p.pad_h > p.kernel_h || 2 * p.pad_w > p.kernel_w)
        throw InputError("pool2d: need kernel >= 1, stride >= 1 and 0 <= padding <= kernel/2; got kernel " +
                         std::to_string(p.kernel_h) + "x" + std::to_string(p.kernel_w) + " stride " +
                         std::to_string(p.stride_h) + "x" + std::to_string(p.stride_w) + " padding " +
                         std::to_string(p.pad_h) + "x" + std::to_string(p.pad_w));
    const int64_t hp = x[2] + 2 * p.pad_h, wp = x[3] + 2 * p.pad_w;
    if (p.kernel_h > hp || p.kernel_w > wp)
        throw InputError("pool2d: kernel " + std::to_string(p.kernel_h) + "x" + std::to_string(p.kernel_w) +
                         " does not fit the padded input " + std::to_string(hp) + "x" + std::to_string(wp) +
                         " (x=" + shape_string(x) + ")");
    return {x[0], x[1], (hp - p.kernel_h) / p.stride_h + 1, (wp - p.kernel_w) / p.stride_w + 1};
}

void maxpool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p) {
    const Shape out = pool2d_output_shape(x.shape(), p);
    require_shape(y, out, "maxpool2d_forward", "y", {{"x", &x}, {"y", &y}});
    RT_DISPATCH(detail::device_of("maxpool2d_forward", {&x, &y}), maxpool2d_forward, x, y, p);
}

void maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, const Pool2dParams& p) {
    const Shape out = pool2d_output_shape(x.shape(), p);
    require(y.shape() == out && dy.shape() == out && dx.shape() == x.shape(), "maxpool2d_backward",
            "y and dy must have shape " + shape_string(out) + " and dx the shape of x",
            {{"x", &x}, {"y", &y}, {"dy", &dy}, {"dx", &dx}});
    RT_DISPATCH(detail::device_of("maxpool2d_backward", {&x, &y, &dy, &dx}), maxpool2d_backward, x, y, dy, dx, p);
}

void maxpool2d_backward_relu(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, const Pool2dParams& p) {
    if (detail::device_of("maxpool2d_backward", {&x, &y, &dy, &dx}) != Device::CPU) {
        maxpool2d_backward(x, y, dy, dx, p);
        activation_backward(Activation::ReLU, x, dx, dx);  // x is the ReLU's output
        return;
    }
    const Shape out = pool2d_output_shape(x.shape(), p);
    require(y.shape() == out && dy.shape() == out && dx.shape() == x.shape(), "maxpool2d_backward",
            "y and dy must have shape " + shape_string(out) + " and dx the shape of x",
            {{"x", &x}, {"y", &y}, {"dy", &dy}, {"dx", &dx}});
    cpu::maxpool2d_backward_relu(x, y, dy, dx, p);
}

}  // namespace ringtrain::ops

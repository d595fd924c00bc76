// Shape checks and device dispatch for average pooling.
#include "dispatch.hpp"
#include "ringtrain/ops/ops.hpp"

namespace ringtrain::ops {

using detail::require;
using detail::require_shape;

void avgpool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p) {
    const Shape out = pool2d_output_shape(x.shape(), p);
    require_shape(y, out, "avgpool2d_forward", "y", {{"x", &x}, {"y", &y}});
    RT_DISPATCH(detail::device_of("avgpool2d_forward", {&x, &y}), avgpool2d_forward, x, y, p);
}

void avgpool2d_backward(const Tensor& dy, Tensor& dx, const Pool2dParams& p) {
    const Shape out = pool2d_output_shape(dx.shape(), p);
    require_shape(dy, out, "avgpool2d_backward", "dy",
            {{"dy", &dy}, {"dx", &dx}});
    RT_DISPATCH(detail::device_of("avgpool2d_backward", {&dy, &dx}), avgpool2d_backward, dy, dx, p);
}

void global_avgpool_forward(const Tensor& x, Tensor& y) {
    require(x.ndim() == 4 && y.ndim() == 2 && y.dim(0) == x.dim(0) && y.dim(1) == x.dim(1), "global_avgpool_forward",
            "x must be [N,C,H,W] and y [N,C]", {{"x", &x}, {"y", &y}});
    RT_DISPATCH(detail::device_of("global_avgpool_forward", {&x, &y}), global_avgpool_forward, x, y);
}

void global_avgpool_backward(const Tensor& dy, Tensor& dx) {
    require(dx.ndim() == 4 && dy.ndim() == 2 && dy.dim(0) == dx.dim(0) && dy.dim(1) == dx.dim(1),
            "global_avgpool_backward", "dx must be [N,C,H,W] and dy [N,C]", {{"dy", &dy}, {"dx", &dx}});
    RT_DISPATCH(detail::device_of("global_avgpool_backward", {&dy, &dx}), global_avgpool_backward, dy, dx);
}

}  // namespace ringtrain::ops

// CUDA average pooling and global average pooling on own kernels (image_kernels.cu): the CPU op's definition
// (padding counts in the divisor) exactly, and a deterministic backward.
#include "cuda_ops.hpp"
#include "image_kernels.hpp"
#include "ringtrain/core/cuda_device.hpp"

namespace ringtrain::ops::cuda {

namespace {
kernels::PoolGeometry geometry(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
    return {x.dim(0) * x.dim(1), x.dim(2), x.dim(3), y.dim(2), y.dim(3), p.kernel_h, p.kernel_w,
            p.stride_h, p.stride_w, p.pad_h, p.pad_w};
}
}  // namespace

void avgpool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p) {
    cuda_check(kernels::avgpool2d_forward(x.data(), y.data(), geometry(x, y, p)), "avgpool2d_forward kernel");
}

void avgpool2d_backward(const Tensor& dy, Tensor& dx, const Pool2dParams& p) {
    cuda_check(kernels::avgpool2d_backward(dy.data(), dx.data(), geometry(dx, dy, p)), "avgpool2d_backward kernel");
}

void global_avgpool_forward(const Tensor& x, Tensor& y) {
    cuda_check(kernels::global_avgpool_forward(x.data(), y.data(), x.dim(0) * x.dim(1), x.dim(2) * x.dim(3)),
               "global_avgpool_forward kernel");
}

void global_avgpool_backward(const Tensor& dy, Tensor& dx) {
    cuda_check(kernels::global_avgpool_backward(dy.data(), dx.data(), dx.dim(0) * dx.dim(1), dx.dim(2) * dx.dim(3)),
               "global_avgpool_backward kernel");
}

}  // namespace ringtrain::ops::cuda

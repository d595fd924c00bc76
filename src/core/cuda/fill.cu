// Device fill for Tensor::fill (a value other than +0.0f; zero goes through cudaMemsetAsync).
#include <cuda_runtime.h>

#include "fill_kernel.hpp"

namespace ringtrain::cuda_detail {

namespace {
__global__ void fill_kernel(float* __restrict__ dst, float value, size_t count) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        dst[i] = value;
}
}  // namespace

int launch_fill(float* dst, float value, size_t count) {
    if (count == 0) return 0;
    const size_t threads = 256;
    size_t blocks = (count + threads - 1) / threads;
    if (blocks > 65535u * 8u) blocks = 65535u * 8u;
    fill_kernel<<<static_cast<unsigned>(blocks), static_cast<unsigned>(threads)>>>(dst, value, count);
    return static_cast<int>(cudaGetLastError());
}

}  // namespace ringtrain::cuda_detail

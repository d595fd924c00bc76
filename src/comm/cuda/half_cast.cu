// fp32 <-> fp16/bf16 conversion kernels for NCCL's 16-bit wire formats (see half_cast.hpp).
// Round to nearest even, as the CPU conversions in comm/half.hpp, so a 16-bit allreduce on one rank gives bitwise
// what half.hpp gives (NaN payloads aside).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "half_cast.hpp"

namespace ringtrain::comm::cuda_detail {

namespace {

// Grid-stride loops: the grid is capped (below), so a bucket of any size is covered with one launch.
__global__ void to_half_kernel(const float* __restrict__ src, __half* __restrict__ dst, size_t count, float scale) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        dst[i] = __float2half_rn(src[i] * scale);
}

__global__ void to_bf16_kernel(const float* __restrict__ src, __nv_bfloat16* __restrict__ dst, size_t count,
                               float scale) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i] * scale);
}

__global__ void from_half_kernel(const __half* __restrict__ src, float* __restrict__ dst, size_t count) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        dst[i] = __half2float(src[i]);
}

__global__ void from_bf16_kernel(const __nv_bfloat16* __restrict__ src, float* __restrict__ dst, size_t count) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

constexpr unsigned kThreads = 256;

unsigned blocks_for(size_t count) {
    size_t blocks = (count + kThreads - 1) / kThreads;
    if (blocks > 65535u * 8u) blocks = 65535u * 8u;
    return static_cast<unsigned>(blocks);
}

}  // namespace

int launch_floats_to_16(const float* src, void* dst, size_t count, float scale, bool bf16, void* stream) {
    if (count == 0) return 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (bf16)
        to_bf16_kernel<<<blocks_for(count), kThreads, 0, s>>>(src, static_cast<__nv_bfloat16*>(dst), count, scale);
    else
        to_half_kernel<<<blocks_for(count), kThreads, 0, s>>>(src, static_cast<__half*>(dst), count, scale);
    return static_cast<int>(cudaGetLastError());
}

int launch_16_to_floats(const void* src, float* dst, size_t count, bool bf16, void* stream) {
    if (count == 0) return 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (bf16)
        from_bf16_kernel<<<blocks_for(count), kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(src), dst, count);
    else
        from_half_kernel<<<blocks_for(count), kThreads, 0, s>>>(static_cast<const __half*>(src), dst, count);
    return static_cast<int>(cudaGetLastError());
}

}  // namespace ringtrain::comm::cuda_detail

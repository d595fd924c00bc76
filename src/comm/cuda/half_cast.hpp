// fp32 <-> fp16/bf16 conversion kernels for NCCL's 16-bit wire formats (see nccl_communicator.hpp). Internal to
// the comm layer; declared without CUDA types so the C++ translation units need no CUDA headers for it.
#pragma once

#include <cstddef>

namespace ringtrain::comm::cuda_detail {

// dst[i] = 16-bit(src[i] * scale), rounded to nearest even (bf16: bfloat16, else IEEE binary16), enqueued on
// `stream` (a cudaStream_t). Returns the launch's cudaError_t as int (0 = cudaSuccess).
int launch_floats_to_16(const float* src, void* dst, size_t count, float scale, bool bf16, void* stream);
// dst[i] = float(src[i]) (exact), enqueued on `stream`.
int launch_16_to_floats(const void* src, float* dst, size_t count, bool bf16, void* stream);

}  // namespace ringtrain::comm::cuda_detail

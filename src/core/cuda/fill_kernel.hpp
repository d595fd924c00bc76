// Private to src/core/cuda: the fill kernel launcher (fill.cu), callable from C++20 code without CUDA headers.
#pragma once

#include <cstddef>

namespace ringtrain::cuda_detail {
// Sets count floats at device pointer dst to value on the legacy default stream; returns the cudaError_t as int.
int launch_fill(float* dst, float value, size_t count);
}  // namespace ringtrain::cuda_detail

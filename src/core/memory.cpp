#include "ringtrain/core/memory.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "ringtrain/core/error.hpp"

namespace ringtrain {

#ifndef RINGTRAIN_WITH_CUDA  // CUDA builds: src/core/cuda/cuda_memory.cpp
namespace {
constexpr size_t kAlignment = 64;  // a cache line, and enough for AVX-512 loads

std::shared_ptr<float> allocate_cpu(size_t count) {
    size_t bytes = (count * sizeof(float) + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return std::shared_ptr<float>(static_cast<float*>(p), [](float* q) { std::free(q); });
}
}  // namespace

bool cuda_available() { return false; }

std::shared_ptr<float> allocate_floats(size_t count, Device device) {
    if (device == Device::CUDA)
        throw Error("a CUDA tensor was requested but this build has no CUDA support; set device to cpu");
    return allocate_cpu(count);
}

void copy_floats(float* dst, Device dst_device, const float* src, Device src_device, size_t count) {
    if (dst_device != Device::CPU || src_device != Device::CPU)
        throw Error("CUDA copy requested but this build has no CUDA support");
    if (dst != src) std::memmove(dst, src, count * sizeof(float));
}

void fill_floats(float* dst, Device device, float value, size_t count) {
    if (device != Device::CPU) throw Error("CUDA fill requested but this build has no CUDA support");
    std::fill(dst, dst + count, value);
}
#endif

}  // namespace ringtrain

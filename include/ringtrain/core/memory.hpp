// Device memory allocation: 64-byte aligned CPU blocks; the CUDA backend adds its caching allocator here.
// Tensor storage comes only from these functions, so a device's memory policy lives in one place.
#pragma once

#include <cstddef>
#include <memory>

#include "ringtrain/core/tensor.hpp"

namespace ringtrain {

// Returns owning storage for `count` floats on `device` (uninitialised).
std::shared_ptr<float> allocate_floats(size_t count, Device device);

// Copies `count` floats between any two devices.
void copy_floats(float* dst, Device dst_device, const float* src, Device src_device, size_t count);

// Sets `count` floats on `device` to `value`.
void fill_floats(float* dst, Device device, float value, size_t count);

// True when this build has CUDA support compiled in and a device is present.
bool cuda_available();

}  // namespace ringtrain

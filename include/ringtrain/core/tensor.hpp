// Tensor: a contiguous float32 array with a shape and a device, sharing storage on copy.
// Layers and ops pass Tensors; ops dispatch on device() so layers never branch on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ringtrain {

enum class Device { CPU, CUDA };

std::string to_string(Device d);

using Shape = std::vector<int64_t>;

std::string shape_string(const Shape& s);
int64_t shape_numel(const Shape& s);

class Tensor {
public:
    Tensor() = default;
    // Allocates uninitialised storage (64-byte aligned on the CPU).
    explicit Tensor(Shape shape, Device device = Device::CPU);

    static Tensor zeros(Shape shape, Device device = Device::CPU);
    static Tensor filled(Shape shape, float value, Device device = Device::CPU);
    // A CPU tensor of `shape` over storage allocated elsewhere (page-locked host memory, say) of at least its element
    // count; resize() keeps that storage while the element count fits.
    static Tensor over_host_storage(std::shared_ptr<float> storage, Shape shape);

    const Shape& shape() const { return shape_; }
    int64_t dim(size_t i) const { return shape_.at(i); }
    size_t ndim() const { return shape_.size(); }
    int64_t numel() const { return numel_; }
    Device device() const { return device_; }
    bool empty() const { return numel_ == 0; }
    bool defined() const { return storage_ != nullptr || numel_ == 0; }
    // Elements the storage holds from data() on (resize() reallocates only past it).
    int64_t capacity() const { return capacity_; }

    float* data() { return storage_.get() + offset_; }
    const float* data() const { return storage_.get() + offset_; }
    std::span<float> span() { return {data(), static_cast<size_t>(numel_)}; }
    std::span<const float> span() const { return {data(), static_cast<size_t>(numel_)}; }

    // A view with another shape of the same element count (shares storage).
    Tensor reshape(Shape shape) const;
    // Rows [begin, end) of the first dimension, as a view.
    Tensor slice_rows(int64_t begin, int64_t end) const;
    // Deep copy.
    Tensor clone() const;

    void fill(float value);
    void zero() { fill(0.0f); }
    void copy_from(const Tensor& other);  // same numel; any device pair

    // Reallocates only if the element count grows beyond the current capacity; keeps storage otherwise.
    void resize(Shape shape);
    // The same on `device`: storage on another device is dropped and allocated there (so buffers follow their input).
    void resize(Shape shape, Device device);
    // A copy on `device` (this tensor itself, shared, when it is already there).
    Tensor to(Device device) const;

private:
    std::shared_ptr<float> storage_;
    Shape shape_;
    int64_t numel_ = 0;
    int64_t capacity_ = 0;
    int64_t offset_ = 0;
    Device device_ = Device::CPU;
};

}  // namespace ringtrain

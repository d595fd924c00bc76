#include "ringtrain/core/tensor.hpp"

#include <sstream>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"

namespace ringtrain {

std::string to_string(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

std::string shape_string(const Shape& s) {
    std::ostringstream os;
    os << '[';
    for (size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
    os << ']';
    return os.str();
}

int64_t shape_numel(const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s) {
        if (d < 0) throw Error("negative dimension in shape " + shape_string(s));
        n *= d;
    }
    return n;
}

Tensor::Tensor(Shape shape, Device device) : shape_(std::move(shape)), device_(device) {
    numel_ = shape_numel(shape_);
    capacity_ = numel_;
    if (numel_ > 0) storage_ = allocate_floats(static_cast<size_t>(numel_), device_);
}

Tensor Tensor::zeros(Shape shape, Device device) { return filled(std::move(shape), 0.0f, device); }

Tensor Tensor::filled(Shape shape, float value, Device device) {
    Tensor t(std::move(shape), device);
    t.fill(value);
    return t;
}

Tensor Tensor::over_host_storage(std::shared_ptr<float> storage, Shape shape) {
    Tensor t;
    t.numel_ = shape_numel(shape);
    if (t.numel_ > 0 && storage == nullptr) throw Error("over_host_storage: no storage for shape " + shape_string(shape));
    t.shape_ = std::move(shape);
    t.capacity_ = t.numel_;
    t.storage_ = std::move(storage);
    return t;
}

Tensor Tensor::reshape(Shape shape) const {
    if (shape_numel(shape) != numel_)
        throw Error("reshape from " + shape_string(shape_) + " to " + shape_string(shape) + " changes the element count");
    Tensor t = *this;
    t.shape_ = std::move(shape);
    return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
    if (shape_.empty() || begin < 0 || begin > end || end > shape_[0])
        throw Error("slice_rows [" + std::to_string(begin) + "," + std::to_string(end) + ") out of range for " +
                    shape_string(shape_));
    Tensor t = *this;
    const int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
    t.shape_[0] = end - begin;
    t.offset_ = offset_ + begin * row;
    t.numel_ = (end - begin) * row;
    t.capacity_ = t.numel_;
    return t;
}

Tensor Tensor::clone() const {
    Tensor t(shape_, device_);
    if (numel_ > 0) t.copy_from(*this);
    return t;
}

void Tensor::fill(float value) {
    if (numel_ > 0) fill_floats(data(), device_, value, static_cast<size_t>(numel_));
}

void Tensor::copy_from(const Tensor& other) {
    if (other.numel_ != numel_)
        throw Error("copy between tensors of different sizes: " + shape_string(shape_) + " <- " +
                    shape_string(other.shape_));
    if (numel_ > 0) copy_floats(data(), device_, other.data(), other.device_, static_cast<size_t>(numel_));
}

void Tensor::resize(Shape shape) {
    const int64_t n = shape_numel(shape);
    if (n > capacity_ || storage_ == nullptr) {
        storage_ = n > 0 ? allocate_floats(static_cast<size_t>(n), device_) : nullptr;
        capacity_ = n;
        offset_ = 0;
    }
    shape_ = std::move(shape);
    numel_ = n;
}

void Tensor::resize(Shape shape, Device device) {
    if (device != device_) {
        storage_.reset();
        capacity_ = 0;
        offset_ = 0;
        device_ = device;
    }
    resize(std::move(shape));
}

Tensor Tensor::to(Device device) const {
    if (device == device_) return *this;
    Tensor t(shape_, device);
    if (numel_ > 0) t.copy_from(*this);
    return t;
}

}  // namespace ringtrain

#include "dispatch.hpp"

namespace ringtrain::ops::detail {

void throw_no_cuda(const char* op) {
    throw Error(std::string("ops::") + op +
                ": the tensors are on cuda but this build has no CUDA support; set device to cpu or rebuild with CUDA");
}

Device device_of(const char* op, std::initializer_list<const Tensor*> ts) {
    bool found = false;
    Device d = Device::CPU;
    for (const Tensor* t : ts) {
        if (t == nullptr || t->empty()) continue;
        if (!found) {
            d = t->device();
            found = true;
        } else if (t->device() != d) {
            throw Error(std::string("ops::") + op + ": tensors are on different devices (" + to_string(d) + " and " +
                        to_string(t->device()) + ")");
        }
    }
    return d;
}

std::string describe(std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
    std::string s;
    for (const auto& [name, t] : ts) {
        if (!s.empty()) s += ' ';
        s += name;
        s += '=';
        s += shape_string(t->shape());
    }
    return s;
}

void require(bool cond, const char* op, const std::string& what,
             std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
    if (!cond) throw Error(std::string("ops::") + op + ": " + what + "; got " + describe(ts));
}

void require_shape(const Tensor& t, const Shape& expected, const char* op, const char* name,
                   std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
    if (t.shape() == expected) return;
    require(false, op, std::string(name) + " must have shape " + shape_string(expected), ts);
}

}  // namespace ringtrain::ops::detail

namespace ringtrain::ops::detail {

void require_cpu_only(const char* op, std::initializer_list<const Tensor*> ts) {
    if (device_of(op, ts) != Device::CPU)
        throw InputError(std::string("ops::") + op + " has no CUDA implementation yet; set device to cpu");
}

}  // namespace ringtrain::ops::detail

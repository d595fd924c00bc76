// Private to src/ops: the device dispatch used by every public op in ops.hpp.
// Each public op checks shapes, finds the device of its tensors, then calls RT_DISPATCH(dev, name, args...),
// which calls ops::cpu::name(args...) or, in a CUDA build, ops::cuda::name(args...). Adding the CUDA backend
// means providing src/ops/cuda/cuda_ops.hpp with the same functions and defining RINGTRAIN_WITH_CUDA; no
// dispatch code changes.
#pragma once

#include <initializer_list>
#include <string>

#include "cpu/cpu_ops.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/tensor.hpp"
#ifdef RINGTRAIN_WITH_CUDA
#include "cuda/cuda_ops.hpp"
#endif

namespace ringtrain::ops::detail {

[[noreturn]] void throw_no_cuda(const char* op);

template <class T = void>
[[noreturn]] T no_cuda(const char* op) {
    throw_no_cuda(op);
}

// The device shared by all non-empty tensors in `ts` (CPU when all are empty); Error when they differ.
Device device_of(const char* op, std::initializer_list<const Tensor*> ts);

// "name=[a,b] name=[c]" for error messages.
std::string describe(std::initializer_list<std::pair<const char*, const Tensor*>> ts);

// Throws Error("ops::<op>: <what>; <shapes>") unless cond holds.
void require(bool cond, const char* op, const std::string& what,
             std::initializer_list<std::pair<const char*, const Tensor*>> ts);

// require(t.shape() == expected, op, "<name> must have shape <expected>", ts), building the message only on failure
// (these checks run on every forward and backward).
void require_shape(const Tensor& t, const Shape& expected, const char* op, const char* name,
                   std::initializer_list<std::pair<const char*, const Tensor*>> ts);

}  // namespace ringtrain::ops::detail

#ifdef RINGTRAIN_WITH_CUDA
#define RT_CUDA_CALL(fn, ...) ::ringtrain::ops::cuda::fn(__VA_ARGS__)
#else
#define RT_CUDA_CALL(fn, ...) ::ringtrain::ops::detail::no_cuda<decltype(::ringtrain::ops::cpu::fn(__VA_ARGS__))>(#fn)
#endif

#define RT_DISPATCH(dev, fn, ...)                                      \
    if ((dev) == ::ringtrain::Device::CPU) return ::ringtrain::ops::cpu::fn(__VA_ARGS__); \
    return RT_CUDA_CALL(fn, __VA_ARGS__)

namespace ringtrain::ops::detail {
// For ops with no CUDA implementation yet: InputError (exit 2) unless every tensor is on the CPU, so a GPU run
// stops with what to do instead of failing to compile in CUDA builds or falling back silently.
void require_cpu_only(const char* op, std::initializer_list<const Tensor*> ts);
}  // namespace ringtrain::ops::detail

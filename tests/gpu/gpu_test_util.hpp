// Helpers for the gpu tests: moving tensors between devices and comparing a GPU result with the CPU op's.
#pragma once

#include "ops/ops_test_util.hpp"
#include "ringtrain/core/tensor.hpp"

namespace gpu_test {

inline ringtrain::Tensor to_gpu(const ringtrain::Tensor& t) {
    ringtrain::Tensor g(t.shape(), ringtrain::Device::CUDA);
    g.copy_from(t);
    return g;
}

inline ringtrain::Tensor to_cpu(const ringtrain::Tensor& t) {
    ringtrain::Tensor c(t.shape(), ringtrain::Device::CPU);
    c.copy_from(t);
    return c;
}

// Every element of the GPU tensor within abs_tol + rel_tol*|cpu| of the CPU tensor.
#define REQUIRE_GPU_CLOSE(gpu, cpu, abs_tol, rel_tol) \
    REQUIRE_CLOSE(gpu_test::to_cpu(gpu), ops_test::to_double(cpu), (abs_tol), (rel_tol))

}  // namespace gpu_test

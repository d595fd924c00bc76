// Parameter initialisation shared by the layers with weights (private to nn).
#pragma once

#include <cmath>

#include "ringtrain/core/rng.hpp"
#include "ringtrain/core/tensor.hpp"

namespace ringtrain::nn::detail {

// PyTorch's default for Linear and Conv: kaiming_uniform(a=sqrt(5)) for weights, which is U(-b, b) with
// b = 1/sqrt(fan_in), and the same bound for biases.
inline void uniform_fan_in(Tensor& t, int64_t fan_in, Rng& rng) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
    for (float& v : t.span()) v = rng.uniform(-bound, bound);
}

}  // namespace ringtrain::nn::detail

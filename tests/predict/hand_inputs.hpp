// Hand-made inputs of the scaling model's tests, whose expected numbers are worked out by hand in the comments.
#pragma once

#include <cstddef>

#include "ringtrain/scaling/link.hpp"
#include "ringtrain/scaling/scaling_model.hpp"
#include "ringtrain/sync/bucket_layout.hpp"

namespace rt_predict_test {

// Three parameters; backward reports p2 at 2 ms, p1 at 6 ms, p0 at 10 ms after backward began.
// One rank: input 1 + forward 4 + backward 10 + optimizer 1 = 16 ms.
inline ringtrain::scaling::StepTimings hand_timings(size_t p2_floats) {
    ringtrain::scaling::StepTimings t;
    t.input_s = 1e-3;
    t.forward_s = 4e-3;
    t.backward_s = 10e-3;
    t.optimizer_s = 1e-3;
    t.grad_floats = {125000, 125000, p2_floats};  // p0, p1: 0.5 MB each
    t.ready_s = {10e-3, 6e-3, 2e-3};
    return t;
}

// Bucket 0 = {p2}, bucket 1 = {p1, p0} (backward order).
inline ringtrain::sync::BucketLayout two_buckets(const ringtrain::scaling::StepTimings& t) {
    const size_t per_bucket[] = {1, 2};
    return ringtrain::sync::BucketLayout(t.grad_floats, per_bucket);
}

inline ringtrain::scaling::Link hand_link() {  // 10 us, 1 GB/s
    ringtrain::scaling::Link l;
    l.alpha_s = 10e-6;
    l.beta_s_per_byte = 1e-9;
    return l;
}

}  // namespace rt_predict_test

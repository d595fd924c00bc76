// The layer-product cases shared by the oneDNN float32 and bf16 tests of ops::layer_gemm: three shapes whose every
// dimension is at least kMinOneDnnGemmDim (one with a long inner dimension, one with a short one), every
// transposition of both operands, beta 0 and 1.
#pragma once

#include <catch2/catch.hpp>

#include "ops_test_util.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/core/tensor.hpp"

namespace gemm_cases {

struct Case {
    int64_t m, k, n;
    bool trans_a, trans_b;
    float beta;
    ringtrain::Tensor a, b, c0;  // op(a) is [m, k], op(b) [k, n]; c0 is c before the call
};

// fn(const Case&) for every case, inside Catch sections' CAPTUREs.
template <class Fn>
void for_each(ringtrain::Rng& rng, Fn fn) {
    using ops_test::random_tensor;
    struct Dims {
        int64_t m, k, n;
    };
    for (const Dims d : {Dims{32, 32, 32}, Dims{37, 300, 45}, Dims{128, 33, 96}})
        for (bool ta : {false, true})
            for (bool tb : {false, true})
                for (float beta : {0.0f, 1.0f}) {
                    CAPTURE(d.m, d.k, d.n, ta, tb, beta);
                    fn(Case{d.m, d.k, d.n, ta, tb, beta,
                            random_tensor(ta ? ringtrain::Shape{d.k, d.m} : ringtrain::Shape{d.m, d.k}, rng),
                            random_tensor(tb ? ringtrain::Shape{d.n, d.k} : ringtrain::Shape{d.k, d.n}, rng),
                            random_tensor({d.m, d.n}, rng)});
                }
}

}  // namespace gemm_cases

// Synchronised BatchNorm at the op level, two "ranks" as two threads: a batch is split into two uneven halves, each
// thread runs ops::batchnorm_forward/backward on its half (on the device under test) with a CrossRankSum that adds
// the two threads' vectors (support/thread_group.hpp), and the results must equal the CPU op on the whole batch without
// `across` — the SyncBN definition: y, mean, inv_std and running stats as one batch's, dx its rows, and the two
// halves' dgamma/dbeta adding up to the whole batch's. Used by test_batchnorm_across.cpp (CPU: checks the harness
// itself) and tests/gpu/test_gpu_batchnorm_sync.cpp (the CUDA op).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "ops/ops_test_util.hpp"
#include "ringtrain/ops/ops.hpp"
#include "support/thread_group.hpp"

namespace bn_halves {

using ringtrain::Device;
using ringtrain::Shape;
using ringtrain::Tensor;

// A deep copy on `d` (Tensor::to shares the tensor when it is already there).
inline Tensor copy_on(const Tensor& t, Device d) {
    Tensor r(t.shape(), d);
    r.copy_from(t);
    return r;
}

// One BatchNorm's tensors: gamma/beta, saved statistics, running stats, parameter gradients.
struct BnTensors {
    Tensor gamma, beta, mean, inv_std, running_mean, running_var, dgamma, dbeta;
    BnTensors copy_on(Device d) const {
        return {bn_halves::copy_on(gamma, d),        bn_halves::copy_on(beta, d),
                bn_halves::copy_on(mean, d),         bn_halves::copy_on(inv_std, d),
                bn_halves::copy_on(running_mean, d), bn_halves::copy_on(running_var, d),
                bn_halves::copy_on(dgamma, d),       bn_halves::copy_on(dbeta, d)};
    }
};

inline BnTensors random_bn(int64_t c, ringtrain::Rng& rng) {
    BnTensors t;
    t.gamma = ops_test::random_tensor({c}, rng, 0.5f, 1.5f);
    t.beta = ops_test::random_tensor({c}, rng, -0.5f, 0.5f);
    t.mean = Tensor::zeros({c});
    t.inv_std = Tensor::zeros({c});
    t.running_mean = ops_test::random_tensor({c}, rng, -0.2f, 0.2f);
    t.running_var = ops_test::random_tensor({c}, rng, 0.8f, 1.2f);
    t.dgamma = ops_test::random_tensor({c}, rng);  // accumulate adds to these
    t.dbeta = ops_test::random_tensor({c}, rng);
    return t;
}

// Tensor `a` (any device) within abs_tol + rel_tol * |b| of the CPU tensor `b`.
#define REQUIRE_BN_CLOSE(a, b, tol) REQUIRE_CLOSE((a).to(Device::CPU), ops_test::to_double(b), (tol), (tol))

// Rows [0, split) and [split, N) of x on `device` (two threads, synchronised) against the CPU op on all N rows,
// over two steps (the running stats move), with accumulate and without; then a backward without dx (a first
// layer's), which must skip the cross-rank sum on both threads alike.
inline void check_halves_equal_whole(const Shape& xs, int64_t split, Device device, double tol) {
    const int64_t n = xs[0], c = xs[1];
    for (const bool accumulate : {false, true}) {
        INFO("x " << ringtrain::shape_string(xs) << " split at row " << split << (accumulate ? " accumulate" : ""));
        ringtrain::Rng rng(31);
        BnTensors whole = random_bn(c, rng);
        const std::array<std::pair<int64_t, int64_t>, 2> rows = {std::pair<int64_t, int64_t>{0, split}, {split, n}};
        std::array<BnTensors, 2> half = {whole.copy_on(device), whole.copy_on(device)};
        // Accumulation: each half starts from its own gradient, the whole batch from their sum.
        const Tensor start_dgamma1 = ops_test::random_tensor({c}, rng);
        const Tensor start_dbeta1 = ops_test::random_tensor({c}, rng);
        half[1].dgamma = copy_on(start_dgamma1, device);
        half[1].dbeta = copy_on(start_dbeta1, device);
        for (int64_t i = 0; i < c; ++i) {
            whole.dgamma.data()[i] += start_dgamma1.data()[i];
            whole.dbeta.data()[i] += start_dbeta1.data()[i];
        }
        ringtrain::ops::BatchNormParams p;
        p.momentum = 0.2f;
        rt_test::ThreadSum group(2);
        // Each half's rows of x and dy on the device, forward then backward on two threads (dx left empty, so
        // skipped, unless with_dx).
        auto run_halves = [&](const Tensor& x, const Tensor& dy, std::array<Tensor, 2>& hy, std::array<Tensor, 2>& hdx,
                              bool with_dx, bool accumulate_grads) {
            std::array<Tensor, 2> hx, hdy;
            for (size_t r = 0; r < 2; ++r) {
                hx[r] = x.slice_rows(rows[r].first, rows[r].second).to(device);
                hdy[r] = dy.slice_rows(rows[r].first, rows[r].second).to(device);
                hy[r] = Tensor(hx[r].shape(), device);
                if (with_dx) hdx[r] = Tensor(hx[r].shape(), device);
            }
            rt_test::on_threads(2, [&](int rank) {
                const size_t r = static_cast<size_t>(rank);
                BnTensors& h = half[r];
                const auto across = group.member(rank);
                ringtrain::ops::batchnorm_forward(hx[r], h.gamma, h.beta, hy[r], h.mean, h.inv_std, h.running_mean,
                                                  h.running_var, p, across);
                ringtrain::ops::batchnorm_backward(hx[r], hdy[r], h.gamma, h.mean, h.inv_std, hdx[r], h.dgamma,
                                                   h.dbeta, true, accumulate_grads, across);
            });
        };
        for (int step = 0; step < 2; ++step) {
            // Shifted well away from zero in the second step: the variance must not come from E[x^2] - E[x]^2.
            Tensor x = ops_test::random_tensor(xs, rng, -1.0f + 20.0f * step, 2.0f + 20.0f * step);
            Tensor dy = ops_test::random_tensor(xs, rng);
            Tensor y(xs), dx(xs);
            ringtrain::ops::batchnorm_forward(x, whole.gamma, whole.beta, y, whole.mean, whole.inv_std,
                                              whole.running_mean, whole.running_var, p);
            ringtrain::ops::batchnorm_backward(x, dy, whole.gamma, whole.mean, whole.inv_std, dx, whole.dgamma,
                                               whole.dbeta, true, accumulate);

            std::array<Tensor, 2> hy, hdx;
            run_halves(x, dy, hy, hdx, /*with_dx=*/true, accumulate);
            for (size_t r = 0; r < 2; ++r) {
                INFO("step " << step << ", half " << r);
                REQUIRE_BN_CLOSE(hy[r], y.slice_rows(rows[r].first, rows[r].second).clone(), tol);
                REQUIRE_BN_CLOSE(hdx[r], dx.slice_rows(rows[r].first, rows[r].second).clone(), tol);
                REQUIRE_BN_CLOSE(half[r].mean, whole.mean, tol);
                REQUIRE_BN_CLOSE(half[r].inv_std, whole.inv_std, tol);
                REQUIRE_BN_CLOSE(half[r].running_mean, whole.running_mean, tol);
                REQUIRE_BN_CLOSE(half[r].running_var, whole.running_var, tol);  // unbiased, with the global count
            }
            // Each half's gamma/beta gradient is its share; the gradient sync adds the shares.
            const Tensor dgamma0 = half[0].dgamma.to(Device::CPU), dgamma1 = half[1].dgamma.to(Device::CPU);
            const Tensor dbeta0 = half[0].dbeta.to(Device::CPU), dbeta1 = half[1].dbeta.to(Device::CPU);
            Tensor dgamma_sum({c}), dbeta_sum({c});
            for (int64_t i = 0; i < c; ++i) {
                dgamma_sum.data()[i] = dgamma0.data()[i] + dgamma1.data()[i];
                dbeta_sum.data()[i] = dbeta0.data()[i] + dbeta1.data()[i];
            }
            REQUIRE_BN_CLOSE(dgamma_sum, whole.dgamma, tol);
            REQUIRE_BN_CLOSE(dbeta_sum, whole.dbeta, tol);
        }
        // Forward: two sums, backward with dx: one; per step, the same on both threads.
        REQUIRE(group.calls(0) == 6);
        REQUIRE(group.calls(1) == 6);

        // No dx: the parameter gradients alone, and no cross-rank sum (a thread waiting alone would hang).
        Tensor x = ops_test::random_tensor(xs, rng), dy = ops_test::random_tensor(xs, rng);
        Tensor y(xs), none;
        ringtrain::ops::batchnorm_forward(x, whole.gamma, whole.beta, y, whole.mean, whole.inv_std, whole.running_mean,
                                          whole.running_var, p);
        ringtrain::ops::batchnorm_backward(x, dy, whole.gamma, whole.mean, whole.inv_std, none, whole.dgamma,
                                           whole.dbeta, true, false);
        std::array<Tensor, 2> hy, hnone;
        run_halves(x, dy, hy, hnone, /*with_dx=*/false, false);
        REQUIRE(group.calls(0) == 8);
        REQUIRE(group.calls(1) == 8);
        const Tensor dgamma0 = half[0].dgamma.to(Device::CPU), dgamma1 = half[1].dgamma.to(Device::CPU);
        Tensor dgamma_sum({c});
        for (int64_t i = 0; i < c; ++i) dgamma_sum.data()[i] = dgamma0.data()[i] + dgamma1.data()[i];
        REQUIRE_BN_CLOSE(dgamma_sum, whole.dgamma, tol);
    }
}

}  // namespace bn_halves

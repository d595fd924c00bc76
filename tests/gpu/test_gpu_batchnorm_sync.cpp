// Synchronised BatchNorm on CUDA (own kernels, cuda/batchnorm_across.cpp) through the two-thread harness
// (tests/ops/bn_two_halves.hpp, whose CPU run in test_ops checks the harness): two halves of a batch on the GPU, each
// on its own thread with `across` summing the two threads' vectors, against the CPU op on the whole batch without
// `across`. y, mean, inv_std, running stats, dx and the summed dgamma/dbeta; 2D [N,C,H,W] and 1D [N,C] / [N,C,L]
// shapes with odd N, C = 3, H*W = 7 and uneven halves. Reductions in another order: 1e-4, as the cuDNN comparison.
#include <catch2/catch.hpp>

#include <span>

#include "ops/bn_two_halves.hpp"
#include "ringtrain/core/error.hpp"

using ringtrain::Device;

TEST_CASE("gpu synchronised batchnorm: two threads' halves equal the CPU op on the whole batch",
          "[gpu][batchnorm][syncbn]") {
    bn_halves::check_halves_equal_whole({5, 3, 7, 1}, 2, Device::CUDA, 1e-4);  // batchnorm2d, H*W = 7
    bn_halves::check_halves_equal_whole({9, 4, 2, 3}, 5, Device::CUDA, 1e-4);
    bn_halves::check_halves_equal_whole({7, 3}, 3, Device::CUDA, 1e-4);     // batchnorm1d on [N, C]
    bn_halves::check_halves_equal_whole({3, 2, 5}, 1, Device::CUDA, 1e-4);  // batchnorm1d on [N, C, L]
    bn_halves::check_halves_equal_whole({2, 3}, 1, Device::CUDA, 1e-4);     // one row each: the global count rules
    // Enough values per channel for several slices per channel in the reduction kernels (256 threads x 8 per block).
    bn_halves::check_halves_equal_whole({33, 3, 17, 19}, 16, Device::CUDA, 1e-4);
}

TEST_CASE("gpu synchronised batchnorm: one value per channel over all ranks is an InputError on every rank",
          "[gpu][batchnorm][syncbn]") {
    ringtrain::Rng rng(4);
    bn_halves::BnTensors t = bn_halves::random_bn(3, rng).copy_on(Device::CUDA);
    const ringtrain::Tensor x = bn_halves::copy_on(ops_test::random_tensor({1, 3}, rng), Device::CUDA);
    ringtrain::Tensor y({1, 3}, Device::CUDA);
    // One rank alone with one row: the count summed "across" (here: nothing to add) is 1.
    const ringtrain::ops::CrossRankSum alone = [](std::span<double>) {};
    REQUIRE_THROWS_AS(ringtrain::ops::batchnorm_forward(x, t.gamma, t.beta, y, t.mean, t.inv_std, t.running_mean,
                                                        t.running_var, ringtrain::ops::BatchNormParams{}, alone),
                      ringtrain::InputError);
}

// The synchronised BatchNorm op on the CPU through the two-thread harness (bn_two_halves.hpp): two halves of a batch
// with `across` equal the op on the whole batch. This checks the harness that tests/gpu runs on the CUDA op, on
// every machine: 2D [N,C,H,W] and 1D [N,C] / [N,C,L] shapes, odd N, C = 3, H*W = 7, uneven halves.
#include <catch2/catch.hpp>

#include "bn_two_halves.hpp"

using ringtrain::Device;

TEST_CASE("batchnorm with across: two threads' halves equal the whole batch (CPU)", "[ops][batchnorm][syncbn]") {
    bn_halves::check_halves_equal_whole({5, 3, 7, 1}, 2, Device::CPU, 1e-5);  // batchnorm2d, H*W = 7
    bn_halves::check_halves_equal_whole({9, 4, 2, 3}, 5, Device::CPU, 1e-5);
    bn_halves::check_halves_equal_whole({7, 3}, 3, Device::CPU, 1e-5);  // batchnorm1d on [N, C]
    bn_halves::check_halves_equal_whole({3, 2, 5}, 1, Device::CPU, 1e-5);  // batchnorm1d on [N, C, L], 1 row | 2
}

TEST_CASE("batchnorm with across: one row per thread is enough when the rows together are two",
          "[ops][batchnorm][syncbn]") {
    // Alone, a [1, C] half would be refused (one value per channel); synchronised, the count is the global one.
    bn_halves::check_halves_equal_whole({2, 3}, 1, Device::CPU, 1e-5);
}

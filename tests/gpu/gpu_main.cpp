// Entry point of the single-process gpu tests: without a CUDA device it prints "no CUDA device" and returns 77,
// which ctest reports as skipped (SKIP_RETURN_CODE), never as passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/memory.hpp"

int main(int argc, char** argv) {
    if (!ringtrain::cuda_available()) {
        std::printf("no CUDA device: skipping the gpu tests (%s)\n", argv[0]);
        return 77;
    }
    ringtrain::select_cuda_device(0);
    std::printf("gpu tests on %s\n", ringtrain::cuda_device_description().c_str());
    const int failed = Catch::Session().run(argc, argv);
    return failed ? 1 : 0;
}

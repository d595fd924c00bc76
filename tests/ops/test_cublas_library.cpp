// cuBLAS is opened on the first GPU GEMM, not at process start (src/ops/cuda/cublas_library.hpp): a process that
// never multiplies on a GPU must not map it. Runs in every CUDA build; needs no GPU (opening the library and looking
// up its functions touches no device).
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "cublas_library.hpp"
#include "ringtrain/ops/ops.hpp"

namespace {

bool mapped(const std::string& library) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line))
        if (line.find(library) != std::string::npos) return true;
    return false;
}

}  // namespace

TEST_CASE("cuBLAS is mapped only once the first GEMM asks for it") {
    using namespace ringtrain::ops::cuda;
    // The test links ringtrain_ops, as the trainer does: linking must not have brought cuBLAS (or cuBLASLt) in.
    REQUIRE_FALSE(mapped("libcublas"));
    ringtrain::ops::open_device_libraries(ringtrain::Device::CPU);  // a CPU run never opens it
    REQUIRE_FALSE(mapped("libcublas"));

    // What the trainer calls at set-up once its device is a GPU.
    ringtrain::ops::open_device_libraries(ringtrain::Device::CUDA);
    CHECK(mapped("libcublas.so"));
    const CublasApi& api = cublas_api();
    CHECK(api.create != nullptr);
    CHECK(api.set_stream != nullptr);
    CHECK(api.sgemm != nullptr);
    REQUIRE(api.status_string != nullptr);
    INFO("cuBLAS says: '" << api.status_string(CUBLAS_STATUS_SUCCESS) << "' / '"
                           << api.status_string(CUBLAS_STATUS_NOT_INITIALIZED) << "'");
    CHECK(std::string(api.status_string(CUBLAS_STATUS_SUCCESS)) != api.status_string(CUBLAS_STATUS_NOT_INITIALIZED));
    CHECK(api.path.find(cublas_soname()) != std::string::npos);
    CHECK(mapped("libcublasLt.so"));  // cuBLAS's own dependency, loaded with it
    CHECK(&cublas_api() == &api);     // opened once
}

#include "cublas_library.hpp"

#include "cuda_ops.hpp"

#include <dlfcn.h>

#include <vector>

#include "ringtrain/core/error.hpp"

namespace ringtrain::ops::cuda {

namespace {

void* open_first(const std::vector<std::string>& candidates, std::string& opened, std::string& why) {
    for (const auto& name : candidates) {
        // RTLD_LOCAL: cuBLAS's symbols stay out of the global namespace, so nothing else binds to them by accident.
        if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
            opened = name;
            return h;
        }
        const char* e = dlerror();
        why += (why.empty() ? "" : "; ") + std::string(e ? e : name + ": unknown dlopen error");
    }
    return nullptr;
}

template <typename Fn>
void look_up(void* lib, const std::string& path, const char* symbol, Fn& fn) {
    fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
    if (fn == nullptr)
        throw Error("cuBLAS at " + path + " has no function " + symbol + ": install cuBLAS " +
                    std::to_string(CUBLAS_VER_MAJOR) + " (the CUDA toolkit this build used)");
}

CublasApi open_cublas() {
    std::vector<std::string> candidates{cublas_soname()};
#ifdef RINGTRAIN_CUBLAS_DIR
    candidates.push_back(std::string(RINGTRAIN_CUBLAS_DIR) + "/" + cublas_soname());
#endif
    CublasApi api;
    std::string why;
    void* lib = open_first(candidates, api.path, why);
    if (lib == nullptr)
        throw Error("cannot open cuBLAS for the GPU's matrix products (" + why + "): install cuBLAS " +
                    std::to_string(CUBLAS_VER_MAJOR) + " or add its folder to LD_LIBRARY_PATH");
    // The handle stays open for the process's life: the handle created from it is process-wide too.
    look_up(lib, api.path, "cublasCreate_v2", api.create);
    look_up(lib, api.path, "cublasSetStream_v2", api.set_stream);
    look_up(lib, api.path, "cublasSgemm_v2", api.sgemm);
    look_up(lib, api.path, "cublasGetStatusString", api.status_string);
    return api;
}

}  // namespace

std::string cublas_soname() { return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR); }

const CublasApi& cublas_api() {
    static const CublasApi api = open_cublas();  // a throw leaves it unset: the next call tries again
    return api;
}

void open_device_libraries() { cublas_api(); }

}  // namespace ringtrain::ops::cuda

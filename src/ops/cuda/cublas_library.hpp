// cuBLAS, opened on the first GPU GEMM instead of linked.
//
// Why: the loader runs libcublasLt's start-up code in every process linked to it, GPU or not. On the 2-vCPU VM that
// cost 0.5-0.7 s per process start (an empty program linked to libcublas: 0.68 s, to cudart, cuDNN or NCCL:
// 0.01 s; bench/RESULTS.md, "cuBLAS opened on first use"), so `ringtrain --help`, every CPU run of a CUDA build and
// every rank of a short job paid it. The trainer calls four cuBLAS functions; they are looked up here once.
#pragma once

#include <cublas_v2.h>

#include <string>

namespace ringtrain::ops::cuda {

struct CublasApi {
    decltype(&::cublasCreate_v2) create = nullptr;
    decltype(&::cublasSetStream_v2) set_stream = nullptr;
    decltype(&::cublasSgemm_v2) sgemm = nullptr;
    decltype(&::cublasGetStatusString) status_string = nullptr;
    std::string path;  // the file dlopen found, for error messages and tests
};

// Opens cuBLAS on the first call (thread-safe) and returns its functions. Tries the library's soname first (so
// LD_LIBRARY_PATH and the system's cache decide, as for a linked library), then the folder the build found it in.
// Throws ringtrain::Error naming the files tried and what to install when it cannot be opened or lacks a function.
const CublasApi& cublas_api();

// The soname this build was compiled against (e.g. "libcublas.so.13").
std::string cublas_soname();

}  // namespace ringtrain::ops::cuda

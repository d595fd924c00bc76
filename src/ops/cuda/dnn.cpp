// CUDA GEMM (cuBLAS), convolution and max pooling (cuDNN).
//
// GEMM: the tensors are row-major and cuBLAS is column-major; a row-major [M,N] matrix is the column-major [N,M]
// matrix of its transpose, so C = op(A)·op(B) is computed as C^T = op(B)^T·op(A)^T with the operands swapped.
//
// Convolution: one ConvPlan per shape (x, w, stride, padding) holds the cuDNN descriptors and, found on first use by
// cudnnFind*Algorithm (which times the candidates once), the fastest algorithm of each direction whose workspace is
// at most 1 GiB. Workspace comes from the caller's Workspace when it is on the GPU, else from the caching allocator.
// FP32 convolutions may use TF32 tensor cores (cuDNN's default math, as in PyTorch); RINGTRAIN_CUDNN_TF32=0 in the
// environment turns that off (FMA math only).
#include <cudnn.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "cublas_library.hpp"
#include "cuda_ops.hpp"
#include "cudnn_handle.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"

namespace ringtrain::ops::cuda {

namespace {

void check_cublas(cublasStatus_t s, const char* call) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw Error(std::string("cuBLAS call ") + call + " failed: " + cublas_api().status_string(s) + " (status " +
                    std::to_string(static_cast<int>(s)) + ")");
}

void check_cudnn(cudnnStatus_t s, const char* call) {
    if (s != CUDNN_STATUS_SUCCESS)
        throw Error(std::string("cuDNN call ") + call + " failed: " + cudnnGetErrorString(s) + " (status " +
                    std::to_string(static_cast<int>(s)) + ")");
}
#define RT_CUBLAS(expr) check_cublas((expr), #expr)
#define RT_CUDNN(expr) check_cudnn((expr), #expr)

// One cuBLAS and one cuDNN handle per process (one GPU per rank), made on first use on the current device. cuBLAS
// itself is opened then too (cublas_library.hpp says why).
cublasHandle_t cublas() {
    static cublasHandle_t h = [] {
        const CublasApi& api = cublas_api();
        cublasHandle_t handle = nullptr;
        RT_CUBLAS(api.create(&handle));
        RT_CUBLAS(api.set_stream(handle, nullptr));
        return handle;
    }();
    return h;
}

cudnnHandle_t cudnn() {
    static cudnnHandle_t h = [] {
        cudnnHandle_t handle = nullptr;
        RT_CUDNN(cudnnCreate(&handle));
        RT_CUDNN(cudnnSetStream(handle, nullptr));
        return handle;
    }();
    return h;
}

bool tf32_allowed() {
    static const bool allowed = [] {
        const char* v = std::getenv("RINGTRAIN_CUDNN_TF32");
        return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    return allowed;
}

// Scratch bytes on the GPU: the caller's workspace when it lives there, else a block from the caching allocator
// (returned to the cache when `hold` goes; the next use is ordered after this op on the same stream).
void* scratch(Workspace& ws, size_t bytes, std::shared_ptr<float>& hold) {
    if (bytes == 0) return nullptr;
    const size_t floats = (bytes + sizeof(float) - 1) / sizeof(float);
    if (ws.device() == Device::CUDA) return ws.floats(floats);
    hold = allocate_floats(floats, Device::CUDA);
    return hold.get();
}

constexpr size_t kMaxWorkspace = size_t{1} << 30;

struct ConvPlan {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    bool have_fwd = false, have_bwd_data = false, have_bwd_filter = false;
    cudnnConvolutionFwdAlgo_t fwd{};
    cudnnConvolutionBwdDataAlgo_t bwd_data{};
    cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
    cudnnMathType_t fwd_math{}, bwd_data_math{}, bwd_filter_math{};
    size_t fwd_ws = 0, bwd_data_ws = 0, bwd_filter_ws = 0;
};

using ConvKey = std::array<int64_t, 12>;

ConvPlan& conv_plan(const Shape& xs, const Shape& wsh, const Conv2dParams& p) {
    static std::mutex mutex;
    static std::map<ConvKey, ConvPlan> plans;  // lives for the process (descriptors are tiny)
    const ConvKey key{xs[0], xs[1], xs[2], xs[3], wsh[0], wsh[1], wsh[2], wsh[3], p.stride_h, p.stride_w, p.pad_h,
                      p.pad_w};
    std::lock_guard<std::mutex> lock(mutex);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    const Shape ys = conv2d_output_shape(xs, wsh, p);
    ConvPlan plan;
    RT_CUDNN(cudnnCreateTensorDescriptor(&plan.x));
    RT_CUDNN(cudnnCreateTensorDescriptor(&plan.y));
    RT_CUDNN(cudnnCreateFilterDescriptor(&plan.w));
    RT_CUDNN(cudnnCreateConvolutionDescriptor(&plan.conv));
    auto i = [](int64_t v) { return static_cast<int>(v); };
    RT_CUDNN(cudnnSetTensor4dDescriptor(plan.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(xs[0]), i(xs[1]), i(xs[2]),
                                        i(xs[3])));
    RT_CUDNN(cudnnSetTensor4dDescriptor(plan.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(ys[0]), i(ys[1]), i(ys[2]),
                                        i(ys[3])));
    RT_CUDNN(cudnnSetFilter4dDescriptor(plan.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(wsh[0]), i(wsh[1]), i(wsh[2]),
                                        i(wsh[3])));
    RT_CUDNN(cudnnSetConvolution2dDescriptor(plan.conv, i(p.pad_h), i(p.pad_w), i(p.stride_h), i(p.stride_w), 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    RT_CUDNN(cudnnSetConvolutionMathType(plan.conv, tf32_allowed() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    return plans.emplace(key, plan).first->second;
}

// The first (fastest) successful result within the workspace limit; null when there is none.
template <class Perf>
const Perf* first_usable(const Perf* perf, int count) {
    for (int k = 0; k < count; ++k)
        if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].memory <= kMaxWorkspace &&
            (tf32_allowed() || perf[k].mathType != CUDNN_TENSOR_OP_MATH))
            return &perf[k];
    return nullptr;
}

template <class Perf>
const Perf& pick(const Perf* perf, int count, const char* what) {
    if (const Perf* p = first_usable(perf, count)) return *p;
    throw Error(std::string("cuDNN found no usable ") + what + " algorithm for this convolution shape");
}

void set_math(ConvPlan& plan, cudnnMathType_t m) { RT_CUDNN(cudnnSetConvolutionMathType(plan.conv, m)); }

cudnnMathType_t base_math() { return tf32_allowed() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH; }

// RINGTRAIN_CUDNN_ALGO=heuristic: take cuDNN's heuristic ranking (cudnnGet*_v7, what PyTorch does without
// cudnn.benchmark) instead of timing every candidate once (cudnnFind*, the default).
bool heuristic_algos() {
    static const bool heuristic = [] {
        const char* v = std::getenv("RINGTRAIN_CUDNN_ALGO");
        return v != nullptr && std::strcmp(v, "heuristic") == 0;
    }();
    return heuristic;
}

// cuDNN's candidate algorithms for one convolution direction, best first, and the one to use: timed by `find`
// (cudnnFind*, the default) or ranked by `get` (cudnnGet*_v7, RINGTRAIN_CUDNN_ALGO=heuristic). The three directions
// differ only in these two functions, their descriptors and their result type.
template <class Perf, int Count, class Get, class Find, class A, class B, class C>
const Perf& choose_algorithm(Get get, Find find, A a, B b, cudnnConvolutionDescriptor_t conv, C c, Perf (&perf)[Count],
                             const char* what) {
    int n = 0;
    if (!heuristic_algos()) {
        // cudnnFind* allocates its trial buffers itself, outside the caching allocator: on a shape first seen mid-run
        // (an evaluation batch) with the cache holding most of the device, every candidate can fail to allocate, on
        // one rank only. Then the cache is emptied and Find runs again; past that, cuDNN's heuristic ranking, which
        // allocates nothing.
        for (int attempt = 0; attempt < 2; ++attempt) {
            if (find(cudnn(), a, b, conv, c, Count, &n, perf) == CUDNN_STATUS_SUCCESS)
                if (const Perf* best = first_usable(perf, n)) return *best;
            cuda_empty_cache();
        }
    }
    check_cudnn(get(cudnn(), a, b, conv, c, Count, &n, perf), "cudnnGetConvolution*Algorithm_v7");
    return pick(perf, n, what);
}

}  // namespace

// ---- GEMM ----

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta) {
    const int64_t M = c.dim(0), N = c.dim(1), K = trans_a ? a.dim(0) : a.dim(1);
    if (M == 0 || N == 0) return;
    if (K == 0) {  // C = beta * C
        if (beta == 0.0f) c.zero();
        else scale(c, beta);
        return;
    }
    const int lda = static_cast<int>(a.dim(1)), ldb = static_cast<int>(b.dim(1)), ldc = static_cast<int>(N);
    RT_CUBLAS(cublas_api().sgemm(cublas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                          static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha, b.data(), ldb,
                          a.data(), lda, &beta, c.data(), ldc));
}

// ---- convolution ----

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p,
                    Workspace& ws) {
    if (y.empty()) return;
    ConvPlan& plan = conv_plan(x.shape(), w.shape(), p);
    if (!plan.have_fwd) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        set_math(plan, base_math());
        const auto& best = choose_algorithm(cudnnGetConvolutionForwardAlgorithm_v7, cudnnFindConvolutionForwardAlgorithm,
                                            plan.x, plan.w, plan.conv, plan.y, perf, "forward convolution");
        plan.fwd = best.algo;
        plan.fwd_ws = best.memory;
        plan.fwd_math = best.mathType;
        plan.have_fwd = true;
    }
    std::shared_ptr<float> hold;
    void* work = scratch(ws, plan.fwd_ws, hold);
    const float one = 1.0f, zero = 0.0f;
    set_math(plan, plan.fwd_math);
    RT_CUDNN(cudnnConvolutionForward(cudnn(), &one, plan.x, x.data(), plan.w, w.data(), plan.conv, plan.fwd, work,
                                     plan.fwd_ws, &zero, plan.y, y.data()));
    if (!bias.empty()) bias_add(y, bias);
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p, Workspace& ws) {
    if (dx.empty()) return;
    ConvPlan& plan = conv_plan(dx.shape(), w.shape(), p);
    if (dy.empty()) {
        dx.zero();
        return;
    }
    if (!plan.have_bwd_data) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        set_math(plan, base_math());
        const auto& best = choose_algorithm(cudnnGetConvolutionBackwardDataAlgorithm_v7,
                                            cudnnFindConvolutionBackwardDataAlgorithm, plan.w, plan.y, plan.conv, plan.x,
                                            perf, "backward-data convolution");
        plan.bwd_data = best.algo;
        plan.bwd_data_ws = best.memory;
        plan.bwd_data_math = best.mathType;
        plan.have_bwd_data = true;
    }
    std::shared_ptr<float> hold;
    void* work = scratch(ws, plan.bwd_data_ws, hold);
    const float one = 1.0f, zero = 0.0f;
    set_math(plan, plan.bwd_data_math);
    RT_CUDNN(cudnnConvolutionBackwardData(cudnn(), &one, plan.w, w.data(), plan.y, dy.data(), plan.conv,
                                          plan.bwd_data, work, plan.bwd_data_ws, &zero, plan.x, dx.data()));
}

void conv2d_backward_filter(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& dbias, const Conv2dParams& p,
                            Workspace& ws, bool accumulate) {
    if (!dbias.empty()) bias_grad(dy, dbias, accumulate);
    if (dw.empty()) return;
    if (x.empty() || dy.empty()) {
        if (!accumulate) dw.zero();
        return;
    }
    ConvPlan& plan = conv_plan(x.shape(), dw.shape(), p);
    if (!plan.have_bwd_filter) {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        set_math(plan, base_math());
        const auto& best = choose_algorithm(cudnnGetConvolutionBackwardFilterAlgorithm_v7,
                                            cudnnFindConvolutionBackwardFilterAlgorithm, plan.x, plan.y, plan.conv, plan.w,
                                            perf, "backward-filter convolution");
        plan.bwd_filter = best.algo;
        plan.bwd_filter_ws = best.memory;
        plan.bwd_filter_math = best.mathType;
        plan.have_bwd_filter = true;
    }
    std::shared_ptr<float> hold;
    void* work = scratch(ws, plan.bwd_filter_ws, hold);
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    set_math(plan, plan.bwd_filter_math);
    RT_CUDNN(cudnnConvolutionBackwardFilter(cudnn(), &one, plan.x, x.data(), plan.y, dy.data(), plan.conv,
                                            plan.bwd_filter, work, plan.bwd_filter_ws, &beta, plan.w, dw.data()));
}

// ---- max pooling ----

namespace {

struct PoolDescs {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnPoolingDescriptor_t pool = nullptr;
    PoolDescs(const Tensor& xt, const Tensor& yt, const Pool2dParams& p) {
        auto i = [](int64_t v) { return static_cast<int>(v); };
        RT_CUDNN(cudnnCreateTensorDescriptor(&x));
        RT_CUDNN(cudnnCreateTensorDescriptor(&y));
        RT_CUDNN(cudnnCreatePoolingDescriptor(&pool));
        RT_CUDNN(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(xt.dim(0)), i(xt.dim(1)),
                                            i(xt.dim(2)), i(xt.dim(3))));
        RT_CUDNN(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(yt.dim(0)), i(yt.dim(1)),
                                            i(yt.dim(2)), i(yt.dim(3))));
        RT_CUDNN(cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_NOT_PROPAGATE_NAN,
                                             i(p.kernel_h), i(p.kernel_w), i(p.pad_h), i(p.pad_w), i(p.stride_h),
                                             i(p.stride_w)));
    }
    ~PoolDescs() {
        cudnnDestroyPoolingDescriptor(pool);
        cudnnDestroyTensorDescriptor(y);
        cudnnDestroyTensorDescriptor(x);
    }
    PoolDescs(const PoolDescs&) = delete;
    PoolDescs& operator=(const PoolDescs&) = delete;
};

}  // namespace

void maxpool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p) {
    if (y.empty()) return;
    PoolDescs d(x, y, p);
    const float one = 1.0f, zero = 0.0f;
    RT_CUDNN(cudnnPoolingForward(cudnn(), d.pool, &one, d.x, x.data(), &zero, d.y, y.data()));
}

void maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, const Pool2dParams& p) {
    if (dx.empty()) return;
    if (y.empty()) {
        dx.zero();
        return;
    }
    PoolDescs d(x, y, p);
    const float one = 1.0f, zero = 0.0f;
    RT_CUDNN(cudnnPoolingBackward(cudnn(), d.pool, &one, d.y, y.data(), d.y, dy.data(), d.x, x.data(), &zero, d.x,
                                  dx.data()));
}

}  // namespace ringtrain::ops::cuda

namespace ringtrain::ops::cuda {
// For batchnorm.cpp (cudnn_handle.hpp): one handle per process.
cudnnHandle_t cudnn_handle() { return cudnn(); }
}  // namespace ringtrain::ops::cuda

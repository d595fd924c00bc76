// CPU GEMM (OpenBLAS when the build found it, else Eigen), bias and vector ops, and the thread-count plumbing for
// Eigen/OpenMP/OpenBLAS.
#include <Eigen/Core>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cpu_ops.hpp"
#include "ringtrain/ops/threads.hpp"
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef RINGTRAIN_WITH_OPENBLAS
#include <cblas.h>
#endif

namespace ringtrain::ops::cpu {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
using MutMap = Eigen::Map<RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

std::once_flag g_threads_once;
std::atomic<int64_t> g_conv_min_columns{0};

template <class A, class B>
void product(MutMap& c, const A& a, const B& b, float alpha, float beta) {
    if (beta == 0.0f) {
        c.noalias() = alpha * a * b;
    } else {
        if (beta != 1.0f) c *= beta;
        c.noalias() += alpha * a * b;
    }
}
}  // namespace

void apply_threads(int n) {
    Eigen::setNbThreads(n);
#ifdef RINGTRAIN_WITH_OPENBLAS
    // OpenBLAS would otherwise start one thread per core in every rank, and ranks already fill the cores.
    openblas_set_num_threads(n);
#endif
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
}

void ensure_threads_applied() {
    std::call_once(g_threads_once, [] { apply_threads(intra_op_threads()); });
}

}  // namespace ringtrain::ops::cpu

namespace ringtrain::ops {

namespace {
// Set in the environment of the restarted program: OPENBLAS_CORETYPE is then ringtrain's doing, not the user's.
constexpr const char* kCoretypeMarker = "RINGTRAIN_SET_OPENBLAS_CORETYPE";

#ifdef RINGTRAIN_WITH_OPENBLAS
// The kernels OpenBLAS should run here when it runs an SSE-era fallback on a newer CPU; nullptr otherwise.
const char* better_openblas_core() {
    const std::string core = openblas_get_corename();
    const bool fallback = core == "Prescott" || core == "Nehalem" || core == "Core2" || core == "Katmai" ||
                          core == "Penryn" || core == "Dunnington" || core == "Atom";
    if (!fallback) return nullptr;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
    if (__builtin_cpu_supports("avx2")) return "Haswell";
    return nullptr;
}
#endif
}  // namespace

std::string cpu_gemm_library() {
#ifdef RINGTRAIN_WITH_OPENBLAS
    std::string config = openblas_get_config();
    while (!config.empty() && config.back() == ' ') config.pop_back();
    const char* chosen = std::getenv("OPENBLAS_CORETYPE");
    if (const char* better = better_openblas_core()) {
        if (chosen && !std::getenv(kCoretypeMarker))  // the user's choice, left alone
            config += std::string(" (OPENBLAS_CORETYPE=") + chosen + " from the environment; " + better +
                      " would be faster on this CPU)";
        else  // the restart could not happen
            config += std::string(" (OpenBLAS does not know this CPU model and runs its ") + openblas_get_corename() +
                      " kernels; OPENBLAS_CORETYPE=" + better + " in the environment gives it this CPU's)";
    }
    else if (std::getenv(kCoretypeMarker))
        config += " (OPENBLAS_CORETYPE set by ringtrain: this OpenBLAS does not know the CPU model)";
    return config;
#else
    return "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
           std::to_string(EIGEN_MINOR_VERSION);
#endif
}

void restart_with_openblas_kernels_for_this_cpu(char** argv) {
#ifdef RINGTRAIN_WITH_OPENBLAS
    if (std::getenv("OPENBLAS_CORETYPE") || std::getenv(kCoretypeMarker)) return;
    const char* better = better_openblas_core();
    if (!better) return;
    // The name it was started by where that is this program (a symlink too), else its own path; never
    // /proc/self/exe, which would rename the process "exe" (ps, pkill, /proc/PID/comm).
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return;
    self[n] = '\0';
    const char* path = self;
    struct stat mine {}, named {};
    if (argv[0] && std::strchr(argv[0], '/') && ::stat(self, &mine) == 0 && ::stat(argv[0], &named) == 0 &&
        mine.st_dev == named.st_dev && mine.st_ino == named.st_ino)
        path = argv[0];
    ::setenv("OPENBLAS_CORETYPE", better, 1);
    ::setenv(kCoretypeMarker, better, 1);
    ::execv(path, argv);
    ::unsetenv("OPENBLAS_CORETYPE");  // no restart: go on as before (cpu_gemm_library says what runs)
    ::unsetenv(kCoretypeMarker);
#else
    (void)argv;
#endif
}

}  // namespace ringtrain::ops

namespace ringtrain::ops::cpu {

void set_conv_min_gemm_columns(int64_t columns) { g_conv_min_columns.store(columns); }
int64_t conv_min_gemm_columns() {
    const int64_t c = g_conv_min_columns.load(std::memory_order_relaxed);
    return c > 0 ? c : 1;  // default: one GEMM per sample (fastest on the shapes measured in bench/ops)
}

void gemm_raw(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    ensure_threads_applied();
#ifdef RINGTRAIN_WITH_OPENBLAS
    if (K > 0) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
                    static_cast<blasint>(N), static_cast<blasint>(K), alpha, A, static_cast<blasint>(lda), B,
                    static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
        return;
    }
#endif
    MutMap c(C, M, N, Eigen::OuterStride<>(ldc));
    if (K == 0) {
        if (beta == 0.0f) c.setZero();
        else c *= beta;
        return;
    }
    ConstMap a(A, ta ? K : M, ta ? M : K, Eigen::OuterStride<>(lda));
    ConstMap b(B, tb ? N : K, tb ? K : N, Eigen::OuterStride<>(ldb));
    if (!ta && !tb) product(c, a, b, alpha, beta);
    else if (!ta && tb) product(c, a, b.transpose(), alpha, beta);
    else if (ta && !tb) product(c, a.transpose(), b, alpha, beta);
    else product(c, a.transpose(), b.transpose(), alpha, beta);
}

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta) {
    const int64_t M = c.dim(0), N = c.dim(1), K = trans_a ? a.dim(0) : a.dim(1);
    gemm_raw(trans_a, trans_b, M, N, K, alpha, a.data(), a.dim(1), b.data(), b.dim(1), beta, c.data(), N);
}

void add_row_sums(const float* m, int64_t rows, int64_t cols, float* out) {
    for (int64_t r = 0; r < rows; ++r) out[r] += ConstArrayMap(m + r * cols, cols).sum();
}

void bias_add(Tensor& y, const Tensor& bias) {
    const int64_t N = y.dim(0), K = y.dim(1), inner = N == 0 || K == 0 ? 0 : y.numel() / (N * K);
    const float* b = bias.data();
    float* py = y.data();
    if (inner == 1) {
        for (int64_t n = 0; n < N; ++n) ArrayMap(py + n * K, K) += ConstArrayMap(b, K);
        return;
    }
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) ArrayMap(py + (n * K + k) * inner, inner) += b[k];
}

void bias_grad(const Tensor& dy, Tensor& dbias, bool accumulate) {
    const int64_t N = dy.dim(0), K = dy.dim(1), inner = N == 0 || K == 0 ? 0 : dy.numel() / (N * K);
    float* db = dbias.data();
    if (!accumulate) std::fill(db, db + K, 0.0f);
    const float* p = dy.data();
    if (inner == 1) {
        for (int64_t n = 0; n < N; ++n) ArrayMap(db, K) += ConstArrayMap(p + n * K, K);
        return;
    }
    for (int64_t n = 0; n < N; ++n) add_row_sums(p + n * K * inner, K, inner, db);
}

void scale(Tensor& x, float alpha) { ArrayMap(x.data(), x.numel()) *= alpha; }

void axpy(float alpha, const Tensor& x, Tensor& y) {
    ArrayMap(y.data(), y.numel()) += alpha * ConstArrayMap(x.data(), x.numel());
}

bool all_finite(const Tensor& x) {
    // Blocks so a NaN early in a big tensor returns quickly.
    constexpr int64_t kBlock = 1 << 14;
    const float* p = x.data();
    for (int64_t i = 0; i < x.numel(); i += kBlock) {
        const int64_t n = std::min(kBlock, x.numel() - i);
        // x - x is 0 for finite x and NaN for Inf/NaN.
        if (!((ConstArrayMap(p + i, n) - ConstArrayMap(p + i, n)) == 0.0f).all()) return false;
    }
    return true;
}

double sum_squares(const Tensor& x) {
    return ConstArrayMap(x.data(), x.numel()).cast<double>().square().sum();
}

}  // namespace ringtrain::ops::cpu

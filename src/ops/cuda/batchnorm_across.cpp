// Synchronised BatchNorm on CUDA (sync.batchnorm): the CPU op's batchnorm_forward_across/backward_across
// (cpu/batchnorm.cpp) with the per-channel reductions, statistics, normalisation and dx in own kernels
// (image_kernels.cu); cuDNN has no call that takes statistics from outside. Same math, in the same double terms: the
// forward sums x per channel (and the count) across ranks, then the squares about that global mean; the backward
// sums sum(dy) and sum(dy * xhat) (2C + 1 doubles) across ranks for dx, while dgamma/dbeta stay this rank's share.
//
// The cross-rank sum (CrossRankSum) works on host doubles, so each sum's [C]-sized vector is copied to the host and
// its result back with cudaMemcpy on the legacy default stream, where every op runs: the copy waits for the kernels
// before it, and the kernels after it see its result. That staging is a few kilobytes a call (C + 1, C and 2C + 1
// doubles), and the step waits for the collective anyway — a device-side collective would save the copies but not
// the wait, and would tie the op to NCCL.
#include <cuda_runtime.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cuda_ops.hpp"
#include "image_kernels.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"

namespace ringtrain::ops::cuda {

namespace {

// x viewed as [N, C, S].
struct BnGeom {
    int64_t N, C, S;
    explicit BnGeom(const Tensor& x)
        : N(x.dim(0)), C(x.dim(1)), S(x.empty() ? 0 : x.numel() / (x.dim(0) * x.dim(1))) {}
    int64_t count() const { return N * S; }
};

// `count` doubles on the device from the caching allocator (its blocks are cudaMalloc'd: aligned for doubles).
class DeviceDoubles {
public:
    explicit DeviceDoubles(size_t count) : storage_(allocate_floats(2 * (count == 0 ? 1 : count), Device::CUDA)) {}
    double* get() const { return reinterpret_cast<double*>(storage_.get()); }

private:
    std::shared_ptr<float> storage_;
};

void launched(int status, const char* kernel) { cuda_check(status, kernel); }

// Host staging of the small per-channel vectors (see the file comment).
void to_host(std::span<double> dst, const double* src) {
    RT_CUDA_CHECK(cudaMemcpy(dst.data(), src, dst.size_bytes(), cudaMemcpyDeviceToHost));
}
void to_device(double* dst, std::span<const double> src) {
    RT_CUDA_CHECK(cudaMemcpy(dst, src.data(), src.size_bytes(), cudaMemcpyHostToDevice));
}

}  // namespace

void batchnorm_forward_across(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                              Tensor& inv_std, Tensor& running_mean, Tensor& running_var, const BatchNormParams& p,
                              const CrossRankSum& across) {
    const BnGeom g(x);
    const size_t C = static_cast<size_t>(g.C);
    DeviceDoubles scratch(kernels::bn_reduce_scratch_doubles(g.N, g.C, g.S));
    DeviceDoubles stats(2 * C);  // [global mean per channel | centred squares per channel]
    double* d_mu = stats.get();
    double* d_ss = stats.get() + C;

    // Pass 1: per-channel sums and the count, summed across ranks.
    std::vector<double> sums(C + 1);
    if (g.C > 0 && g.count() > 0) {
        launched(kernels::bn_channel_sums(x.data(), d_mu, g.N, g.C, g.S, scratch.get()), "bn_channel_sums kernel");
        to_host(std::span<double>(sums).first(C), d_mu);
    }
    sums[C] = static_cast<double>(g.count());
    across(sums);
    const double m = sums[C];  // the same on every rank: every rank throws or none
    if (m < 2.0)
        throw InputError("batchnorm: training needs more than one value per channel over all ranks (" +
                         std::to_string(static_cast<int64_t>(m)) + " in all); use a larger batch per rank");

    // Pass 2: squares about the global mean, summed across ranks.
    std::vector<double> mu(C), squares(C);
    for (size_t c = 0; c < C; ++c) mu[c] = sums[c] / m;
    if (g.C > 0) to_device(d_mu, mu);
    if (g.C > 0 && g.count() > 0) {
        launched(kernels::bn_channel_centred_squares(x.data(), d_mu, d_ss, g.N, g.C, g.S, scratch.get()),
                 "bn_channel_centred_squares kernel");
        to_host(squares, d_ss);
    }
    across(squares);
    if (g.C == 0) return;

    // The global statistics: saved for backward, into the running stats, and y.
    to_device(d_ss, squares);
    const auto scale_shift = allocate_floats(2 * C, Device::CUDA);
    float* scale = scale_shift.get();
    float* shift = scale_shift.get() + C;
    launched(kernels::bn_apply_global_stats(d_mu, d_ss, m, p.eps, p.momentum, gamma.data(), beta.data(), mean.data(),
                                            inv_std.data(), running_mean.data(), running_var.data(), scale, shift,
                                            g.C),
             "bn_apply_global_stats kernel");
    if (g.count() > 0)
        launched(kernels::bn_scale_shift(x.data(), y.data(), scale, shift, g.N, g.C, g.S), "bn_scale_shift kernel");
}

void batchnorm_backward_across(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                               const Tensor& inv_std, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool accumulate,
                               const CrossRankSum& across) {
    const BnGeom g(x);
    const size_t C = static_cast<size_t>(g.C);
    // [sum dy per channel | sum dy * xhat per channel]; dgamma/dbeta written from them on the device.
    DeviceDoubles d_sums(2 * C);
    if (g.C > 0) {
        DeviceDoubles scratch(kernels::bn_reduce_scratch_doubles(g.N, g.C, g.S));
        launched(kernels::bn_gradient_sums(x.data(), dy.data(), mean.data(), inv_std.data(), d_sums.get(),
                                           dgamma.data(), dbeta.data(), g.N, g.C, g.S, accumulate, scratch.get()),
                 "bn_gradient_sums kernel");
    }
    // A layer whose input needs no gradient (the model's first) skips the collective on every rank alike.
    if (dx.empty()) return;
    std::vector<double> sums(2 * C + 1);
    if (g.C > 0) to_host(std::span<double>(sums).first(2 * C), d_sums.get());
    sums[2 * C] = static_cast<double>(g.count());
    across(sums);
    if (g.C == 0 || g.count() == 0) return;
    const double m = sums[2 * C];
    for (size_t k = 0; k < 2 * C; ++k) sums[k] /= m;  // every rank's mean dy and mean dy * xhat
    to_device(d_sums.get(), std::span<const double>(sums).first(2 * C));
    launched(kernels::bn_input_gradient(x.data(), dy.data(), gamma.data(), mean.data(), inv_std.data(), d_sums.get(),
                                        dx.data(), g.N, g.C, g.S),
             "bn_input_gradient kernel");
}

}  // namespace ringtrain::ops::cuda

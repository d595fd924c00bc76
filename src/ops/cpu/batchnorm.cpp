// CPU batch normalisation. Channel statistics are summed in double: a channel of a large batch holds N*H*W
// values, and a float running sum would lose the small variances that matter. Each sum runs in kLanes independent
// double partial sums (one chain per element was latency-bound at ~1 ns an element, ~45 % of the quality CNN's CPU
// step; bench/RESULTS.md "BatchNorm's sums in lanes"), which the compiler turns into vector adds.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ringtrain/core/error.hpp"

#include "cpu_ops.hpp"
#include "parallel.hpp"

namespace ringtrain::ops::cpu {

namespace {
// x viewed as [N, C, S].
struct BnGeom {
    int64_t N, C, S;
    explicit BnGeom(const Tensor& x) : N(x.dim(0)), C(x.dim(1)), S(x.numel() / (x.dim(0) * x.dim(1))) {}
    int64_t count() const { return N * S; }
};

constexpr int kLanes = 16;

// Partial sums in lanes: element k of a sample's channel adds to lane k % kLanes; total() adds the lanes in order.
struct LaneSums {
    double lane[kLanes] = {};
    double total() const {
        double s = 0.0;
        for (double v : lane) s += v;
        return s;
    }
};

// Over channel c's values (every sample's S of them): block(x, dy) for each whole block of kLanes values (x and dy
// point at the block; dy null without pdy), tail(lane, x, dy) for each value after the last block (dy 0 without
// pdy). The block is its own function, not the tail's term in a loop: one with a per-element term and a zero dy
// for the statistics measured ~15 % slower.
template <class Block, class Tail>
void for_channel_blocks(const BnGeom& g, int64_t c, const float* px, const float* pdy, Block block, Tail tail) {
    for (int64_t n = 0; n < g.N; ++n) {
        const int64_t off = (n * g.C + c) * g.S;
        const float* xc = px + off;
        const float* dyc = pdy ? pdy + off : nullptr;
        int64_t k = 0;
        for (; k + kLanes <= g.S; k += kLanes) block(xc + k, dyc ? dyc + k : nullptr);
        for (; k < g.S; ++k) tail(k % kLanes, xc[k], dyc ? dyc[k] : 0.0f);
    }
}

// Channel c's mean and sum of (x - mean)^2 in one pass over x, from sums of x - K and (x - K)^2 with K one of the
// channel's values (the shifted-data algorithm): in double the subtraction loses only as many digits as
// (mean - K)^2 / var is large, and K is a sample of the same distribution, so ~1e-15 of the variance remains
// exact even 10^5 standard deviations from zero (test_batchnorm_lanes). One read of x instead of two.
std::pair<double, double> channel_mean_and_squares(const BnGeom& g, int64_t c, const float* px) {
    const double shift = px[c * g.S];
    LaneSums s, ss;
    for_channel_blocks(
        g, c, px, nullptr,
        [&](const float* x, const float*) {
            for (int j = 0; j < kLanes; ++j) {
                const double d = x[j] - shift;
                s.lane[j] += d;
                ss.lane[j] += d * d;
            }
        },
        [&](int j, float x, float) {
            const double d = x - shift;
            s.lane[j] += d;
            ss.lane[j] += d * d;
        });
    const double m = double(g.count()), sum = s.total();
    return {shift + sum / m, std::max(ss.total() - sum * sum / m, 0.0)};
}

// Channel c's sum of x, and its sum of (x - mu)^2 (synchronised BatchNorm: about the mean of every rank's values).
double channel_sum(const BnGeom& g, int64_t c, const float* px) {
    LaneSums s;
    for_channel_blocks(
        g, c, px, nullptr,
        [&](const float* x, const float*) {
            for (int j = 0; j < kLanes; ++j) s.lane[j] += x[j];
        },
        [&](int j, float x, float) { s.lane[j] += x; });
    return s.total();
}
double channel_centred_squares(const BnGeom& g, int64_t c, const float* px, double mu) {
    LaneSums s;
    for_channel_blocks(
        g, c, px, nullptr,
        [&](const float* x, const float*) {
            for (int j = 0; j < kLanes; ++j) s.lane[j] += (x[j] - mu) * (x[j] - mu);
        },
        [&](int j, float x, float) { s.lane[j] += (x - mu) * (x - mu); });
    return s.total();
}

// mu as hi + lo floats: (x - hi) - lo is x - mu to float precision of the difference, where x - float(mu) would be
// off by mu's rounding (times 1/std: a mean of 1000 with a spread of 0.01 moved every output by ~0.005), and
// x * scale + shift would cancel two values ~mu/std large.
struct SplitMean {
    float hi, lo;
    explicit SplitMean(double mu) : hi(static_cast<float>(mu)), lo(static_cast<float>(mu - double(hi))) {}
    float centre(float x) const { return (x - hi) - lo; }
};

// Channel c's statistics: saved for backward (mean, inv_std), and y = gamma (x - mu) inv + beta (then max(y, 0)
// with `relu`: the ReLU after the layer, while y is in registers).
void normalise_channel(const BnGeom& g, int64_t c, double mu, double inv, const Tensor& gamma, const Tensor& beta,
                       const float* px, float* py, Tensor& mean, Tensor& inv_std, bool relu) {
    mean.data()[c] = static_cast<float>(mu);
    inv_std.data()[c] = static_cast<float>(inv);
    const float scale = static_cast<float>(gamma.data()[c] * inv), shift = beta.data()[c];
    const SplitMean m(mu);
    for (int64_t n = 0; n < g.N; ++n) {
        const float* xc = px + (n * g.C + c) * g.S;
        float* yc = py + (n * g.C + c) * g.S;
        if (relu) {
            for (int64_t k = 0; k < g.S; ++k) yc[k] = std::max(m.centre(xc[k]) * scale + shift, 0.0f);
        } else {
            for (int64_t k = 0; k < g.S; ++k) yc[k] = m.centre(xc[k]) * scale + shift;
        }
    }
}

// running = (1 - momentum) running + momentum batch, with the batch's unbiased variance (PyTorch's rule).
void update_running_stats(Tensor& running_mean, Tensor& running_var, int64_t c, double mu, double unbiased_var,
                          double momentum) {
    running_mean.data()[c] = static_cast<float>((1.0 - momentum) * running_mean.data()[c] + momentum * mu);
    running_var.data()[c] = static_cast<float>((1.0 - momentum) * running_var.data()[c] + momentum * unbiased_var);
}
// Channel c's sum of dy and of dy * xhat (xhat = (x - mu) * inv): dbeta and dgamma, and the two sums dx needs.
std::pair<double, double> channel_gradient_sums(const BnGeom& g, int64_t c, const float* px, const float* pdy, double mu,
                                                double inv) {
    LaneSums dy_sum, dy_xhat_sum;  // sum dy * (x - mu), times inv at the end
    for_channel_blocks(
        g, c, px, pdy,
        [&](const float* x, const float* dy) {
            for (int j = 0; j < kLanes; ++j) {
                dy_sum.lane[j] += dy[j];
                dy_xhat_sum.lane[j] += double(dy[j]) * (x[j] - mu);
            }
        },
        [&](int j, float x, float dy) {
            dy_sum.lane[j] += dy;
            dy_xhat_sum.lane[j] += double(dy) * (x - mu);
        });
    return {dy_sum.total(), dy_xhat_sum.total() * inv};
}

// dx of channel c: gi * (dy - mean_dy - xhat * mean_dy_xhat), with the means over the batch (or all ranks' batches),
// as a * dy + b * (x - mu) + c with the coefficients formed in double and the per-element work in float (x - mu
// through SplitMean, so a mean far from zero does not cancel in a large b * x + c).
void channel_input_gradient(const BnGeom& g, int64_t c, const float* px, const float* pdy, float* pdx, double mu,
                            double inv, double gi, double mean_dy, double mean_dy_xhat) {
    const float a = static_cast<float>(gi), b = static_cast<float>(-gi * inv * mean_dy_xhat);
    const float c0 = static_cast<float>(-gi * mean_dy);
    const SplitMean m(mu);
    for (int64_t n = 0; n < g.N; ++n) {
        const float* xc = px + (n * g.C + c) * g.S;
        const float* dyc = pdy + (n * g.C + c) * g.S;
        float* dxc = pdx + (n * g.C + c) * g.S;
        for (int64_t k = 0; k < g.S; ++k) dxc[k] = a * dyc[k] + (b * m.centre(xc[k]) + c0);
    }
}

// A parameter gradient written, or added to what earlier passes left (gradient accumulation).
void set_or_add(float& grad, double value, bool accumulate) {
    grad = static_cast<float>(value + (accumulate ? grad : 0.0));
}
}  // namespace

void batchnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& inv_std, Tensor& running_mean, Tensor& running_var, const BatchNormParams& p) {
    const BnGeom g(x);
    const float* px = x.data();
    float* py = y.data();
    parallel_for(g.C, [&](int64_t c) {
        double mu, inv;
        if (p.training) {
            double ss;
            std::tie(mu, ss) = channel_mean_and_squares(g, c, px);
            const double var = ss / double(g.count());
            inv = 1.0 / std::sqrt(var + double(p.eps));
            update_running_stats(running_mean, running_var, c, mu, ss / double(g.count() - 1), p.momentum);
        } else {
            mu = running_mean.data()[c];
            inv = 1.0 / std::sqrt(double(running_var.data()[c]) + double(p.eps));
        }
        normalise_channel(g, c, mu, inv, gamma, beta, px, py, mean, inv_std, p.relu);
    });
}

void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& inv_std, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool batch_stats,
                        bool accumulate) {
    const BnGeom g(x);
    const float* px = x.data();
    const float* pdy = dy.data();
    float* pdx = dx.empty() ? nullptr : dx.data();
    parallel_for(g.C, [&](int64_t c) {
        const double mu = mean.data()[c], inv = inv_std.data()[c];
        const auto [sum_dy, sum_dy_xhat] = channel_gradient_sums(g, c, px, pdy, mu, inv);
        set_or_add(dgamma.data()[c], sum_dy_xhat, accumulate);
        set_or_add(dbeta.data()[c], sum_dy, accumulate);
        if (!pdx) return;
        const double gi = gamma.data()[c] * inv;
        // Batch statistics: dx = gamma*inv/M * (M*dy - sum(dy) - xhat*sum(dy*xhat)); running stats are constants.
        const double mean_dy = batch_stats ? sum_dy / double(g.count()) : 0.0;
        const double mean_dy_xhat = batch_stats ? sum_dy_xhat / double(g.count()) : 0.0;
        channel_input_gradient(g, c, px, pdy, pdx, mu, inv, gi, mean_dy, mean_dy_xhat);
    });
}

// ---- synchronised BatchNorm ----
// The statistics of the ranks' batches together, as one batch would give them: pass 1 sums x per channel (and the
// count) and sums those across ranks, giving the global mean; pass 2 sums (x - global mean)^2 and sums that across
// ranks. Two small collectives instead of one, but the variance is formed exactly as the one-rank two-pass code
// above forms it, never as E[x^2] - E[x]^2 (which cancels when |mean| >> std), and all in double.

void batchnorm_forward_across(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                              Tensor& inv_std, Tensor& running_mean, Tensor& running_var, const BatchNormParams& p,
                              const CrossRankSum& across) {
    const BnGeom g(x);
    const float* px = x.data();
    float* py = y.data();
    std::vector<double> sums(static_cast<size_t>(g.C + 1));
    parallel_for(g.C, [&](int64_t c) { sums[static_cast<size_t>(c)] = channel_sum(g, c, px); });
    sums[static_cast<size_t>(g.C)] = static_cast<double>(g.count());
    across(sums);
    const double m = sums[static_cast<size_t>(g.C)];  // the same on every rank: every rank throws or none
    if (m < 2.0)
        throw InputError("batchnorm: training needs more than one value per channel over all ranks (" +
                         std::to_string(static_cast<int64_t>(m)) + " in all); use a larger batch per rank");
    std::vector<double> squares(static_cast<size_t>(g.C));
    parallel_for(g.C, [&](int64_t c) {
        squares[static_cast<size_t>(c)] = channel_centred_squares(g, c, px, sums[static_cast<size_t>(c)] / m);
    });
    across(squares);
    parallel_for(g.C, [&](int64_t c) {
        const double mu = sums[static_cast<size_t>(c)] / m, ss = squares[static_cast<size_t>(c)];
        const double inv = 1.0 / std::sqrt(ss / m + double(p.eps));
        update_running_stats(running_mean, running_var, c, mu, ss / (m - 1.0), p.momentum);
        normalise_channel(g, c, mu, inv, gamma, beta, px, py, mean, inv_std, p.relu);
    });
}

// dgamma/dbeta stay this rank's share (the gradient sync adds the shares, as for every parameter); dx needs the
// sums over every rank's batch, since each output depends on the whole batch through its statistics.
void batchnorm_backward_across(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                               const Tensor& inv_std, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool accumulate,
                               const CrossRankSum& across) {
    const BnGeom g(x);
    const float* px = x.data();
    const float* pdy = dy.data();
    // [sum dy per channel | sum dy * xhat per channel | count]
    std::vector<double> sums(static_cast<size_t>(2 * g.C + 1));
    parallel_for(g.C, [&](int64_t c) {
        const auto [sum_dy, sum_dy_xhat] =
            channel_gradient_sums(g, c, px, pdy, mean.data()[c], inv_std.data()[c]);
        sums[static_cast<size_t>(c)] = sum_dy;
        sums[static_cast<size_t>(g.C + c)] = sum_dy_xhat;
        set_or_add(dgamma.data()[c], sum_dy_xhat, accumulate);
        set_or_add(dbeta.data()[c], sum_dy, accumulate);
    });
    // A layer whose input needs no gradient (the model's first) skips the collective on every rank alike.
    if (dx.empty()) return;
    sums[static_cast<size_t>(2 * g.C)] = static_cast<double>(g.count());
    across(sums);
    const double m = sums[static_cast<size_t>(2 * g.C)];
    float* pdx = dx.data();
    parallel_for(g.C, [&](int64_t c) {
        const double mu = mean.data()[c], inv = inv_std.data()[c];
        const double gi = gamma.data()[c] * inv;
        const double mean_dy = sums[static_cast<size_t>(c)] / m;
        const double mean_dy_xhat = sums[static_cast<size_t>(g.C + c)] / m;
        channel_input_gradient(g, c, px, pdy, pdx, mu, inv, gi, mean_dy, mean_dy_xhat);
    });
}

}  // namespace ringtrain::ops::cpu

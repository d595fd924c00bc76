#include "ringtrain/predict/straggler_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/rng.hpp"

namespace ringtrain::predict {

namespace {

// A draw from a rank's step times: a uniform point between neighbouring quantiles (each gap holds equal mass).
double draw(Rng& rng, const std::vector<double>& q) {
    const double u = static_cast<double>(rng.uniform()) * static_cast<double>(q.size() - 1);
    const auto lo = std::min(static_cast<size_t>(u), q.size() - 1);
    const size_t hi = std::min(lo + 1, q.size() - 1);
    return q[lo] + (u - static_cast<double>(lo)) * (q[hi] - q[lo]);
}

// N distinct measured ranks (N <= M): a fresh shuffle's first N each trial, each drawing one step.
double expected_max_distinct(const std::vector<std::vector<double>>& per_rank, int n, uint64_t seed, int trials) {
    const int m = static_cast<int>(per_rank.size());
    Rng rng(seed);
    std::vector<int> order(static_cast<size_t>(m));
    double sum_max = 0;
    for (int t = 0; t < trials; ++t) {
        std::iota(order.begin(), order.end(), 0);
        double slowest = 0;
        for (int i = 0; i < n; ++i) {
            const int j = i + static_cast<int>(rng.below(static_cast<uint64_t>(m - i)));
            std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
            slowest = std::max(slowest, draw(rng, per_rank[static_cast<size_t>(order[static_cast<size_t>(i)])]));
        }
        sum_max += slowest;
    }
    return sum_max / trials;
}

// N ranks each one of the measured ones at random (N > M): every draw is from the mixture F = mean of the ranks'
// distributions, so E[max] = x_min + integral over [x_min, x_max] of 1 - F(x)^N, exactly: F is piecewise linear
// between the union of the ranks' quantiles, and each piece's integral of F^N has a closed form. No sampling, so no
// cost growing with N (10^6 ranks took minutes by sampling).
double expected_max_mixture(const std::vector<std::vector<double>>& per_rank, int n) {
    std::vector<double> xs;
    for (const auto& q : per_rank) xs.insert(xs.end(), q.begin(), q.end());
    std::sort(xs.begin(), xs.end());
    xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
    // F at x, each rank's CDF linear between its quantiles (level i / (k - 1) at q[i]); repeated quantiles are an
    // atom, where F jumps: `right` is F(x), `left` its limit from below. Between neighbouring breakpoints F is linear.
    const auto cdf = [&](double x, bool left) {
        double f = 0;
        for (const auto& q : per_rank) {
            if (left ? x > q.back() : x >= q.back()) {
                f += 1.0;
                continue;
            }
            if (left ? x <= q.front() : x < q.front()) continue;
            const auto it = left ? std::lower_bound(q.begin(), q.end(), x) : std::upper_bound(q.begin(), q.end(), x);
            const auto i = static_cast<size_t>(it - q.begin());  // q[i-1] < x <= q[i] (left), q[i-1] <= x < q[i]
            const double level = static_cast<double>(i - 1) +
                                 (q[i] > q[i - 1] ? (x - q[i - 1]) / (q[i] - q[i - 1]) : 0.0);
            f += level / static_cast<double>(q.size() - 1);
        }
        return f / static_cast<double>(per_rank.size());
    };
    const double np1 = static_cast<double>(n) + 1.0;
    double e = xs.front();
    for (size_t j = 1; j < xs.size(); ++j) {
        const double x0 = xs[j - 1], x1 = xs[j], w = x1 - x0;
        const double f0 = cdf(x0, false), f1 = cdf(x1, true);
        // The integral of F^N over the piece, F linear from f0 to f1.
        const double power = f1 > f0 ? (std::pow(f1, np1) - std::pow(f0, np1)) / (np1 * (f1 - f0))
                                     : std::pow(f0, static_cast<double>(n));
        e += w * (1.0 - power);
    }
    return e;
}

}  // namespace

double straggler_share(const std::vector<std::vector<double>>& per_rank, double base_s, int n, uint64_t seed,
                       int trials) {
    if (per_rank.empty() || n < 1 || trials < 1 || !(base_s > 0))
        throw Error("straggler_share: needs measured ranks, n >= 1, trials >= 1 and a positive base");
    for (const auto& q : per_rank)
        if (q.empty() || !std::is_sorted(q.begin(), q.end())) throw Error("straggler_share: unsorted or no quantiles");
    const int m = static_cast<int>(per_rank.size());
    const double expected_max =
        n <= m ? expected_max_distinct(per_rank, n, seed, trials) : expected_max_mixture(per_rank, n);
    return std::max(0.0, expected_max / base_s - 1.0);
}

}  // namespace ringtrain::predict

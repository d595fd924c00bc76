#include "ringtrain/predict/straggler_estimate.hpp"

#include <algorithm>
#include <numeric>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/rng.hpp"

namespace ringtrain::predict {

double straggler_share(const std::vector<std::vector<double>>& per_rank, double base_s, int n, uint64_t seed,
                       int trials) {
    if (per_rank.empty() || n < 1 || trials < 1 || !(base_s > 0))
        throw Error("straggler_share: needs measured ranks, n >= 1, trials >= 1 and a positive base");
    for (const auto& q : per_rank)
        if (q.empty()) throw Error("straggler_share: a rank without quantiles");
    const int m = static_cast<int>(per_rank.size());
    Rng rng(seed);
    std::vector<int> order(static_cast<size_t>(m));
    double sum_max = 0;
    for (int t = 0; t < trials; ++t) {
        // Which measured ranks play the N: a fresh shuffle's first N while they are distinct, uniform draws beyond.
        if (n <= m) {
            std::iota(order.begin(), order.end(), 0);
            for (int i = 0; i < n; ++i) {
                const int j = i + static_cast<int>(rng.below(static_cast<uint64_t>(m - i)));
                std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
            }
        }
        double slowest = 0;
        for (int i = 0; i < n; ++i) {
            const int r = n <= m ? order[static_cast<size_t>(i)] : static_cast<int>(rng.below(static_cast<uint64_t>(m)));
            const auto& q = per_rank[static_cast<size_t>(r)];
            // A draw from the rank's step times: a uniform point between neighbouring quantiles.
            const double u = static_cast<double>(rng.uniform()) * static_cast<double>(q.size() - 1);
            const auto lo = std::min(static_cast<size_t>(u), q.size() - 1);
            const size_t hi = std::min(lo + 1, q.size() - 1);
            slowest = std::max(slowest, q[lo] + (u - static_cast<double>(lo)) * (q[hi] - q[lo]));
        }
        sum_max += slowest;
    }
    return std::max(0.0, sum_max / trials / base_s - 1.0);
}

}  // namespace ringtrain::predict

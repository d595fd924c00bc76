#include "ringtrain/core/quantiles.hpp"

#include <algorithm>
#include <cstddef>

namespace ringtrain {

std::vector<double> quantiles(std::vector<double> sample, int k) {
    if (sample.empty() || k < 2) return {};
    std::sort(sample.begin(), sample.end());
    std::vector<double> q(static_cast<size_t>(k));
    const double last = static_cast<double>(sample.size() - 1);
    for (int i = 0; i < k; ++i) {
        const double pos = last * i / (k - 1);
        const auto lo = static_cast<size_t>(pos);
        const size_t hi = std::min(lo + 1, sample.size() - 1);
        q[static_cast<size_t>(i)] = sample[lo] + (pos - static_cast<double>(lo)) * (sample[hi] - sample[lo]);
    }
    return q;
}

double median(std::vector<double> sample) {
    if (sample.empty()) return 0.0;
    std::sort(sample.begin(), sample.end());
    const size_t m = sample.size() / 2;
    return sample.size() % 2 ? sample[m] : 0.5 * (sample[m - 1] + sample[m]);
}

}  // namespace ringtrain

// MeasuredAllreduce: see the header.
#include "ringtrain/scaling/measured_allreduce.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "ringtrain/core/error.hpp"

namespace ringtrain::scaling {

MeasuredAllreduce::MeasuredAllreduce(std::vector<LinkSample> samples, int ranks, Algorithm algorithm, Link fitted)
    : samples_(std::move(samples)), ranks_(ranks), algorithm_(algorithm), link_(std::move(fitted)) {
    if (ranks_ < 2) throw Error("MeasuredAllreduce: times are measured between two or more ranks");
    std::sort(samples_.begin(), samples_.end(), [](const LinkSample& a, const LinkSample& b) { return a.bytes < b.bytes; });
    for (size_t i = 0; i < samples_.size(); ++i) {
        if (!(samples_[i].bytes > 0) || !(samples_[i].seconds > 0))
            throw Error("MeasuredAllreduce: a measured allreduce of " + std::to_string(samples_[i].bytes) + " bytes took " +
                        std::to_string(samples_[i].seconds) + " s");
        if (i > 0 && samples_[i].bytes == samples_[i - 1].bytes)
            throw Error("MeasuredAllreduce: two measurements of " + std::to_string(samples_[i].bytes) + " bytes");
    }
    if (samples_.size() < 2) throw Error("MeasuredAllreduce: needs two or more measured sizes");
}

double MeasuredAllreduce::model_s(int n, double wire_bytes, double float32_bytes) const {
    return allreduce_time(algorithm_, n, wire_bytes, link_, float32_bytes).total();
}

double MeasuredAllreduce::at_measured_ranks(double bytes) const {
    // Beyond the measured sizes: the nearest one's time, scaled as the model scales it (a fitted link of α = β = 0
    // has nothing to scale by: that time as it is).
    const auto beyond = [&](const LinkSample& edge) {
        const double model_edge = model_s(ranks_, edge.bytes, edge.bytes);
        const double model_here = model_s(ranks_, bytes, bytes);
        return model_edge > 0 && model_here > 0 ? edge.seconds * model_here / model_edge : edge.seconds;
    };
    if (bytes <= samples_.front().bytes) return beyond(samples_.front());
    if (bytes >= samples_.back().bytes) return beyond(samples_.back());
    const auto hi = std::lower_bound(samples_.begin(), samples_.end(), bytes,
                                     [](const LinkSample& s, double b) { return s.bytes < b; });
    if (hi->bytes == bytes) return hi->seconds;
    const auto lo = hi - 1;
    // A straight line between the two on log-log axes: times grow as a power of the size between measured sizes
    // (flat where latency rules, linear where bandwidth does).
    const double f = std::log(bytes / lo->bytes) / std::log(hi->bytes / lo->bytes);
    return lo->seconds * std::pow(hi->seconds / lo->seconds, f);
}

double MeasuredAllreduce::seconds(int n, double wire_bytes, double float32_bytes) const {
    if (n <= 1 || !(wire_bytes > 0)) return 0.0;
    const double measured = at_measured_ranks(wire_bytes);
    if (n == ranks_ && wire_bytes == float32_bytes) return measured;
    const double model_measured = model_s(ranks_, wire_bytes, wire_bytes);
    const double model_here = model_s(n, wire_bytes, float32_bytes);
    return model_measured > 0 ? measured * model_here / model_measured : model_here;
}

}  // namespace ringtrain::scaling

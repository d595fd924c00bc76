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
    // fit_link gives α or β above 0 from times above 0; a link of neither would have no shape to carry.
    if (!(link_.alpha_s > 0 || link_.beta_s_per_byte > 0))
        throw Error("MeasuredAllreduce: the fitted link has neither latency nor bandwidth cost");
}

double MeasuredAllreduce::model_s(int n, double wire_bytes, double float32_bytes) const {
    return allreduce_time(algorithm_, n, wire_bytes, link_, float32_bytes).total();
}

double MeasuredAllreduce::at_measured_ranks(double bytes) const {
    // Below the smallest measured size: that size's time. It is latency already (4 KiB), and a fit that put all of
    // it in β would scale it towards 0.
    if (bytes <= samples_.front().bytes) return samples_.front().seconds;
    const auto hi = std::lower_bound(samples_.begin(), samples_.end(), bytes,
                                     [](const LinkSample& s, double b) { return s.bytes < b; });
    if (hi != samples_.end() && hi->bytes == bytes) return hi->seconds;
    // Elsewhere the model at this size times measured / model, interpolated between the neighbours on a log scale
    // of the size (and held beyond the largest): the model carries the shape, such as the ring backend's switch from
    // recursive doubling to the ring at 128 KiB between two measured sizes, and the measurements how far off it the
    // transport runs.
    const auto lo = hi - 1;
    const double model_here = model_s(ranks_, bytes, bytes);
    const double ratio_lo = lo->seconds / model_s(ranks_, lo->bytes, lo->bytes);
    if (hi == samples_.end()) return model_here * ratio_lo;
    const double ratio_hi = hi->seconds / model_s(ranks_, hi->bytes, hi->bytes);
    const double f = std::log(bytes / lo->bytes) / std::log(hi->bytes / lo->bytes);
    return model_here * ratio_lo * std::pow(ratio_hi / ratio_lo, f);
}

double MeasuredAllreduce::seconds(int n, double wire_bytes, double float32_bytes) const {
    if (n <= 1 || !(wire_bytes > 0)) return 0.0;
    const double measured = at_measured_ranks(wire_bytes);
    if (n == ranks_ && wire_bytes == float32_bytes) return measured;
    return measured * model_s(n, wire_bytes, float32_bytes) / model_s(ranks_, wire_bytes, wire_bytes);
}

}  // namespace ringtrain::scaling

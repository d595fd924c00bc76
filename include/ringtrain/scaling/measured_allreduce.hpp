// Allreduce times measured at one rank count (`ringtrain predict --measure`), as the time of any message at any N.
// A line through the measured sizes misses wherever the transport is not one α and β: Open MPI switches algorithms
// by size (at 2 ranks over TCP at 100 Mbit/s its 1 and 4 MiB allreduces took 1.4x the ring's time, its 64 KiB
// 0.5x), and a token bucket lets small messages through faster than large ones (bench/RESULTS.md, "Measured
// allreduce times per bucket"). So each bucket takes the time measured at its size, and the model only carries it
// to other N.
#pragma once

#include <span>
#include <vector>

#include "ringtrain/scaling/link.hpp"
#include "ringtrain/scaling/scaling_model.hpp"

namespace ringtrain::scaling {

class MeasuredAllreduce {
public:
    // `samples`: float32 allreduces (bytes, fastest seconds) at `ranks` ranks, two or more distinct sizes, every time
    // above 0; `fitted`: the link fitted to them through `algorithm` (fit_link: α or β above 0). Throws Error
    // otherwise.
    MeasuredAllreduce(std::vector<LinkSample> samples, int ranks, Algorithm algorithm, Link fitted);

    // Seconds for an allreduce of `wire_bytes` on the wire (`float32_bytes` before compression) at `n` ranks: at the
    // measured N and a measured size, that measurement; between measured sizes, the model's time there times the
    // ratio measured / model, interpolated between the two sizes on a log scale (held beyond the largest); below the
    // smallest, the smallest's time; at another N (or with compression), that time times the model's ratio of the
    // two (allreduce_time with the fitted link). 0 at one rank.
    double seconds(int n, double wire_bytes, double float32_bytes) const;

    int ranks() const { return ranks_; }
    std::span<const LinkSample> samples() const { return samples_; }

private:
    double model_s(int n, double wire_bytes, double float32_bytes) const;
    double at_measured_ranks(double bytes) const;

    std::vector<LinkSample> samples_;  // by size
    int ranks_;
    Algorithm algorithm_;
    Link link_;
};

}  // namespace ringtrain::scaling

// Link: the α-β cost of moving n bytes between two ranks (α seconds of latency per message, β seconds per byte),
// given on the command line ("10gbit,5us") or fitted by least squares from timed allreduces.
#pragma once

#include <span>
#include <string>

namespace ringtrain::scaling {

struct Link {
    double alpha_s = 0;        // per message
    double beta_s_per_byte = 0;
    std::string source;        // "given 10gbit,5us" / "measured over mpi, 2 ranks"

    double bytes_per_s() const { return beta_s_per_byte > 0 ? 1.0 / beta_s_per_byte : 0.0; }
};

// "RATE[,LATENCY]": RATE a number with gbit, mbit or kbit (per second), LATENCY a number with us, ms or s (default
// 5us). Throws InputError naming the flag and the accepted units.
Link parse_link(const std::string& text);

// Least-squares fit of t = a + b·bytes over the points (at least two distinct sizes); returns {a, b}. Throws Error
// when the sizes do not differ.
struct LineFit {
    double intercept = 0, slope = 0;
};
// `weights` (optional, one per point): weighted least squares, e.g. 1/t² for relative errors.
LineFit fit_line(std::span<const double> bytes, std::span<const double> seconds, std::span<const double> weights = {});

// One timed allreduce size: `seconds` for `bytes` at the job's rank count.
struct LinkSample {
    double bytes = 0, seconds = 0;
};
// The ring model 2(N−1)α + 2(N−1)/N·n·β fitted to allreduce times taken at `ranks` ranks (least squares on relative
// errors: the sizes may span orders of magnitude, and an unweighted fit would let the largest messages' noise decide
// α), so that predictions at N = `ranks` reproduce the samples. Needs two distinct sizes and ranks >= 2 (Error
// otherwise); a negative fitted α or β is clamped to 0. `source` goes into Link::source.
Link fit_ring_link(std::span<const LinkSample> samples, int ranks, std::string source);

}  // namespace ringtrain::scaling

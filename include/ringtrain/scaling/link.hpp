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

// One timed allreduce size: `seconds` for `bytes` on the wire at the job's rank count. `float32_bytes`, when not 0,
// is the message's float32 size (twice `bytes` under 16-bit compression): what the ring backend picks its algorithm by.
struct LinkSample {
    double bytes = 0, seconds = 0, float32_bytes = 0;
};

}  // namespace ringtrain::scaling

// Fitting the link: timed allreduces at several sizes over a real communicator, α and β by least squares.
#pragma once

#include <span>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/scaling/link.hpp"
#include "ringtrain/scaling/scaling_model.hpp"

namespace ringtrain::predict {

struct LinkMeasurement {
    scaling::Link link;
    std::vector<scaling::LinkSample> samples;  // per size, by size: the fastest repeat (the slowest rank's)
};

// The sizes --measure times: 16 MiB down to 4 KiB by factors of 4, largest first. A shaper's token bucket (tc tbf,
// a virtual NIC's burst allowance) lets its first few hundred KB through at burst speed, which a training run
// sending more a step than the bucket refills during its compute has long spent; timed smallest first, the small
// sizes went at burst speed and the fit saw a 2-3 Gbit/s link over a 100 Mbit/s one (bench/RESULTS.md, "--measure
// over a token bucket").
std::vector<double> link_sizes();

// `repeats` allreduces of `data` over `comm` after one warm-up (it pays for set-up), each after a barrier: this rank's
// seconds for each. Collective.
std::vector<double> time_allreduces(comm::Communicator& comm, std::span<float> data, int repeats);

// Allreduces of `sizes_bytes` (float32) in that order over `comm`, `repeats` times each after one warm-up, and
// `algorithm`'s model (Auto: each size by the algorithm the ring backend takes for it) fitted to the fastest repeat
// of each size (scaling::fit_link: predictions at N = comm.size() reproduce the measurement).
// Collective: every rank calls it with the same arguments. α and β are kept >= 0.
LinkMeasurement measure_link(comm::Communicator& comm, const std::vector<double>& sizes_bytes, int repeats,
                             scaling::Algorithm algorithm);

}  // namespace ringtrain::predict

// Fitting the link: timed allreduces at several sizes over a real communicator, α and β by least squares.
#pragma once

#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/scaling/link.hpp"
#include "ringtrain/scaling/scaling_model.hpp"

namespace ringtrain::predict {

struct LinkMeasurement {
    scaling::Link link;
    std::vector<scaling::LinkSample> samples;  // per size, the fastest repeat (the slowest rank's)
};

// Allreduces of `sizes_bytes` (float32) over `comm`, `repeats` times each after one warm-up, and `algorithm`'s model
// (Auto: each size by the algorithm the ring backend takes for it) fitted to the fastest repeat of each size
// (scaling::fit_link: predictions at N = comm.size() reproduce the measurement).
// Collective: every rank calls it with the same arguments. α and β are kept >= 0.
LinkMeasurement measure_link(comm::Communicator& comm, const std::vector<double>& sizes_bytes, int repeats,
                             scaling::Algorithm algorithm);

}  // namespace ringtrain::predict

// measure_link: see the header.
#include "ringtrain/predict/link_measurement.hpp"

#include <algorithm>
#include <chrono>

#include "ringtrain/core/error.hpp"

namespace ringtrain::predict {

std::vector<double> link_sizes() {
    std::vector<double> sizes;
    for (double b = 16.0 * 1048576; b >= 4096; b /= 4) sizes.push_back(b);
    return sizes;
}

std::vector<double> time_allreduces(comm::Communicator& comm, std::span<float> data, int repeats) {
    std::vector<double> times;
    for (int r = 0; r <= repeats; ++r) {
        comm.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        comm.allreduce(data, comm::ReduceOp::Sum);
        const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) times.push_back(t);  // the first one pays for set-up
    }
    return times;
}

LinkMeasurement measure_link(comm::Communicator& comm, const std::vector<double>& sizes_bytes, int repeats,
                             scaling::Algorithm algorithm) {
    if (repeats < 1 || sizes_bytes.empty()) throw Error("measure_link: needs at least one size and one repeat");
    const int n = comm.size();
    if (n < 2) throw InputError("predict --measure needs two or more ranks: run it under mpirun -np 2");
    LinkMeasurement m;
    std::vector<float> buffer;
    for (double bytes : sizes_bytes) {
        buffer.assign(static_cast<size_t>(bytes / sizeof(float)), 1.0f);
        const std::vector<double> times = time_allreduces(comm, buffer, repeats);
        // The fastest repeat is the transport's own cost: on a shared host the others include waiting to be
        // scheduled, which is the load of the moment, not the link (the sweep's ceiling measures that). The slowest
        // rank's time is the collective's: ranks leave at different moments.
        double fastest = *std::min_element(times.begin(), times.end());
        comm.allreduce(std::span<double>(&fastest, 1), comm::ReduceOp::Max);
        m.samples.push_back({static_cast<double>(buffer.size() * sizeof(float)), fastest});
    }
    std::sort(m.samples.begin(), m.samples.end(),
              [](const scaling::LinkSample& x, const scaling::LinkSample& y) { return x.bytes < y.bytes; });
    m.link = scaling::fit_link(m.samples, n, algorithm,
                               "measured: allreduce over " + comm.backend() + " at " + std::to_string(n) + " ranks, " +
                                   scaling::to_string(algorithm) + " model");
    return m;
}

}  // namespace ringtrain::predict

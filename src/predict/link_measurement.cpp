// measure_link: see the header.
#include "ringtrain/predict/link_measurement.hpp"

#include <algorithm>
#include <chrono>

#include "ringtrain/core/error.hpp"

namespace ringtrain::predict {

LinkMeasurement measure_link(comm::Communicator& comm, const std::vector<double>& sizes_bytes, int repeats) {
    const int n = comm.size();
    if (n < 2) throw InputError("predict --measure needs two or more ranks: run it under mpirun -np 2");
    LinkMeasurement m;
    std::vector<float> buffer;
    for (double bytes : sizes_bytes) {
        buffer.assign(static_cast<size_t>(bytes / sizeof(float)), 1.0f);
        std::vector<double> times;
        for (int r = 0; r <= repeats; ++r) {
            comm.barrier();
            const auto t0 = std::chrono::steady_clock::now();
            comm.allreduce(std::span<float>(buffer), comm::ReduceOp::Sum);
            const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (r > 0) times.push_back(t);  // the first one pays for set-up
        }
        // The fastest repeat is the transport's own cost: on a shared host the others include waiting to be
        // scheduled, which is the load of the moment, not the link (the sweep's ceiling measures that). The slowest
        // rank's time is the collective's: ranks leave at different moments.
        double fastest = *std::min_element(times.begin(), times.end());
        comm.allreduce(std::span<double>(&fastest, 1), comm::ReduceOp::Max);
        m.samples.push_back({static_cast<double>(buffer.size() * sizeof(float)), fastest});
    }
    std::vector<double> x, y;
    for (const auto& s : m.samples) {
        x.push_back(s.bytes);
        y.push_back(s.seconds);
    }
    // Relative errors: the sizes span four orders of magnitude, and an unweighted fit would let the largest
    // messages' noise decide α.
    std::vector<double> w;
    for (double t : y) w.push_back(1.0 / std::max(t * t, 1e-18));
    const LineFit f = fit_line(x, y, w);
    m.link.alpha_s = std::max(0.0, f.intercept / (2.0 * (n - 1)));
    m.link.beta_s_per_byte = std::max(0.0, f.slope / (2.0 * (n - 1) / n));
    m.link.source = "measured: allreduce over " + comm.backend() + " at " + std::to_string(n) + " ranks";
    return m;
}

}  // namespace ringtrain::predict

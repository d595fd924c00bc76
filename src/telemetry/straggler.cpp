// Straggler analysis of the ranks' per-step local work. See the header.
#include "ringtrain/telemetry/straggler.hpp"

#include <algorithm>

namespace ringtrain::telemetry {

StragglerReport analyse_stragglers(const std::vector<std::vector<float>>& per_rank) {
    StragglerReport r;
    const size_t ranks = per_rank.size();
    if (ranks == 0) return r;
    size_t steps = per_rank[0].size();
    for (const auto& log : per_rank) steps = std::min(steps, log.size());
    r.steps = static_cast<int64_t>(steps);
    r.slowest_steps_per_rank.assign(ranks, 0);
    r.wait_caused_s_per_rank.assign(ranks, 0.0);
    r.mean_work_ms_per_rank.assign(ranks, 0.0);
    for (size_t s = 0; s < steps; ++s) {
        size_t slowest = 0;
        double sum = 0;
        for (size_t k = 0; k < ranks; ++k) {
            const double c = per_rank[k][s];
            sum += c;
            r.mean_work_ms_per_rank[k] += c;
            if (c > per_rank[slowest][s]) slowest = k;
        }
        const double mean = sum / static_cast<double>(ranks);
        r.work_s += mean;
        r.straggler_s += static_cast<double>(per_rank[slowest][s]) - mean;
        r.wait_caused_s_per_rank[slowest] += static_cast<double>(per_rank[slowest][s]) - mean;
        ++r.slowest_steps_per_rank[slowest];
    }
    if (steps > 0)
        for (double& m : r.mean_work_ms_per_rank) m *= 1e3 / static_cast<double>(steps);
    return r;
}

}  // namespace ringtrain::telemetry

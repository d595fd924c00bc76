// The wait for the slowest rank at N ranks, from ranks measured side by side (`ringtrain predict --measure` under
// mpirun -np M: every rank profiles the step at once). A synchronous step lasts as long as its slowest rank's local
// work; on cores that do not run at one speed (vCPUs, turbo limits, a busy neighbour) that is well above one rank's
// median, and a one-rank profile cannot see it (bench/RESULTS.md, "ringtrain predict vs those runs": -16..-43 %).
#pragma once

#include <cstdint>
#include <vector>

namespace ringtrain::predict {

// E[max over N ranks of one step's local work] / base_s - 1, at least 0: the straggler share of the step model
// (scaling::Setting::straggler), base_s being the step the model scales (rank 0's median phases). Each rank's step
// times are its sorted quantiles, each gap between neighbours holding equal mass. While N <= M (the machine's own
// cores) the N are distinct measured ranks, each drawing its work independently: seeded sampling, `trials` draws.
// Beyond, each of the N is one of the measured ranks at random (more hosts like this one): every draw comes from
// their mixture, whose expected maximum is computed exactly.
double straggler_share(const std::vector<std::vector<double>>& work_quantiles_per_rank, double base_s, int n,
                       uint64_t seed = 1, int trials = 20000);

}  // namespace ringtrain::predict

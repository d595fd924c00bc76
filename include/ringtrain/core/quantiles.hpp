// Quantiles of a sample, as a short sorted summary of it (a rank's step times, for predict's straggler share), and
// its median (a profile's phase times, an allreduce's repeats).
#pragma once

#include <vector>

namespace ringtrain {

// k sorted quantiles at 0, 1/(k-1), ..., 1, linearly interpolated between order statistics; empty for an empty
// sample or k < 2.
std::vector<double> quantiles(std::vector<double> sample, int k = 101);

// The middle value (the mean of the middle two for an even count); 0 for an empty sample.
double median(std::vector<double> sample);

}  // namespace ringtrain

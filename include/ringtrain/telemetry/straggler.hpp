// Lockstep cost: each rank's local work per synchronised step (data, forward, backward), and how much of every step
// the ranks spent waiting for the slowest one -- time that no faster network, fusion or overlap can win back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ringtrain::telemetry {

// One rank's local work per synchronised step in seconds: the first `capacity` steps of the run (float: 4 bytes a
// step, gathered once at the end).
class StepWorkLog {
public:
    explicit StepWorkLog(size_t capacity = size_t{1} << 20) : capacity_(capacity) {}
    void record(double seconds) {
        if (seconds_.size() < capacity_) seconds_.push_back(static_cast<float>(seconds));
        else ++dropped_;
    }
    std::span<const float> seconds() const { return seconds_; }
    uint64_t dropped() const { return dropped_; }

private:
    size_t capacity_;
    std::vector<float> seconds_;
    uint64_t dropped_ = 0;
};

// With c[r][s] = rank r's local work in step s: in a synchronous step every rank waits until the slowest one has
// finished its work, so sum over s of (max_r c[r][s] - mean_r c[r][s]) is what the average rank lost to imbalance.
struct StragglerReport {
    int64_t steps = 0;                            // steps present in every rank's log
    double work_s = 0;                            // sum over steps of the mean local work
    double straggler_s = 0;                       // sum over steps of (slowest - mean) local work
    std::vector<int64_t> slowest_steps_per_rank;  // steps in which each rank was the slowest (first on ties)
    // Each rank's share of straggler_s: its (work - mean) summed over the steps it was the slowest. A rank stopped
    // for long spells can be last in only half the steps and still cause nearly all of the wait.
    std::vector<double> wait_caused_s_per_rank;
    std::vector<double> mean_work_ms_per_rank;
};

// per_rank[r] is rank r's log; steps beyond the shortest log are left out. Empty input gives an empty report.
StragglerReport analyse_stragglers(const std::vector<std::vector<float>>& per_rank);

}  // namespace ringtrain::telemetry

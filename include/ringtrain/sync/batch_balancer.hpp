// BatchBalancer (sync.balance: "speed"): splits each step's global batch among the ranks in proportion to their
// measured speed, so that a rank on a slower core gets fewer of the step's samples and the others do not wait for it.
//
// Why: a synchronous step lasts as long as its slowest rank. On shared machines (cloud vCPUs, a node with other
// tenants) a core's speed changes in spells of tens of steps, independently on each rank; on the development VM the
// wait for the slower vCPU was 3-8 % of every step (bench/RESULTS.md, "Where the rest of the N = 2 loss comes from").
// The remedy is LB-BSP's ("semi-dynamic load balancing", Chen et al., SoCC 2020): keep the global batch, move
// samples from slow ranks to fast ones. The step's samples and their number are unchanged, and each rank's summed
// gradient is scaled by 1/train.batch_size (not by its own share) before the average over the ranks, so the result is
// the same mean over the same global batch as with an even split: only the float summation order differs.
//
// Every rank must split alike: the decision is a pure function of values every rank receives from one allreduce of
// integers carried in doubles (exact whatever the order of the sums), so every rank computes the same counts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::sync {

// `total` samples split among ranks whose measured seconds per sample are `seconds_per_sample` (each > 0): in
// proportion to their speed, none below `floor`, summing to `total` exactly (largest remainders, ties to the lower
// rank). Needs total >= floor x ranks.
std::vector<int64_t> split_by_speed(std::span<const double> seconds_per_sample, int64_t total, int64_t floor);

// What a run's balancing did, for summary.json (the same on every rank).
struct BalanceStats {
    int64_t exchanges = 0;
    std::vector<int64_t> samples;    // per rank: samples read in the steps the exchanges covered
    std::vector<int64_t> batch_min;  // per rank: the smallest and largest per-rank batch decided
    std::vector<int64_t> batch_max;
};

class BatchBalancer {
public:
    // `comm` is borrowed and used on the calling thread only (the training thread's communicator, not the gradient
    // path's). `batch_per_rank` is train.batch_size: the global batch is that times the ranks.
    BatchBalancer(comm::Communicator& comm, int64_t batch_per_rank);

    // This rank's local work for one step (data, forward, backward: what depends on its share of the batch) and the
    // samples it read. Called once per step on every rank.
    void record(double work_s, int64_t samples);
    // Whether this step ends with an exchange: the same answer on every rank (it counts steps, and the period is
    // decided from exchanged values). About every 10 ms of work: a speed measured over less is mostly the scheduler's.
    bool due() const { return steps_since_exchange_ >= period_; }
    // Collective: every rank's work and samples since the last exchange; a new split from them. Returns true when the
    // split changed (counts()).
    bool exchange();
    // The per-rank batch each rank reads from now on (rank order; sums to batch_per_rank x ranks).
    const std::vector<int64_t>& counts() const { return counts_; }
    const BalanceStats& stats() const { return stats_; }

private:
    comm::Communicator& comm_;
    const int world_;
    const int64_t batch_;
    std::vector<int64_t> counts_;
    std::vector<double> seconds_per_sample_;  // smoothed, per rank (0 = not measured yet)
    int64_t period_ = 1;
    int64_t steps_since_exchange_ = 0;
    int64_t steps_recorded_ = 0;
    double work_s_ = 0;      // this rank, since the last exchange
    int64_t samples_ = 0;
    BalanceStats stats_;
};

}  // namespace ringtrain::sync

#include "ringtrain/sync/batch_balancer.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "ringtrain/core/error.hpp"

namespace ringtrain::sync {

namespace {

// An exchange about every this much work (and at least every step). A speed measured over less is mostly the
// scheduler's: a rank descheduled for a millisecond inside 2 ms of work looks twice as slow, and on logistic
// regression's 0.3 ms steps a split that followed such spells lost throughput (bench/RESULTS.md, "Speed-balanced
// batches"). The allreduce itself costs microseconds.
constexpr double kExchangeEvery_s = 10e-3;
constexpr int64_t kMaxPeriod = 64;
// Weight of the newest measurement in the smoothed seconds per sample, and the gain a new split must promise (a
// step this much shorter by the smoothed speeds). Chosen on the 2-vCPU VM (bench/RESULTS.md, "Speed-balanced
// batches"): with 0.5 and 8 % the split followed per-step jitter on a quiet machine and lost a few per cent to new
// batch shapes; with 0.3 and 15 % it stays put there and still moves within a few exchanges for a rank at 60 % of
// a core.
constexpr double kNewWeight = 0.3;
constexpr double kMinGain = 0.15;

}  // namespace

std::vector<int64_t> split_by_speed(std::span<const double> seconds_per_sample, int64_t total, int64_t floor) {
    const size_t n = seconds_per_sample.size();
    check(n > 0 && floor >= 0 && total >= floor * static_cast<int64_t>(n),
          "split_by_speed: " + std::to_string(total) + " samples cannot give " + std::to_string(n) + " ranks " +
              std::to_string(floor) + " each");
    for (double s : seconds_per_sample)
        check(std::isfinite(s) && s > 0, "split_by_speed: seconds per sample must be positive and finite");
    // Water-filling: ranks whose proportional share falls under the floor get the floor; the rest share what is left
    // in proportion to speed. At most n rounds (each pins at least one more rank or ends).
    std::vector<double> want(n, 0.0);
    std::vector<char> pinned(n, 0);
    for (size_t round = 0; round <= n; ++round) {
        double speed_sum = 0.0;
        int64_t left = total;
        for (size_t r = 0; r < n; ++r) {
            if (pinned[r]) left -= floor;
            else speed_sum += 1.0 / seconds_per_sample[r];
        }
        bool pinned_more = false;
        for (size_t r = 0; r < n; ++r) {
            if (pinned[r]) {
                want[r] = static_cast<double>(floor);
                continue;
            }
            want[r] = static_cast<double>(left) * (1.0 / seconds_per_sample[r]) / speed_sum;
            if (want[r] < static_cast<double>(floor)) {
                pinned[r] = 1;
                pinned_more = true;
            }
        }
        if (!pinned_more) break;
    }
    // Integers: floors first, then the samples left over one each to the largest remainders (ties to the lower rank).
    std::vector<int64_t> counts(n);
    int64_t given = 0;
    for (size_t r = 0; r < n; ++r) {
        counts[r] = std::max<int64_t>(floor, static_cast<int64_t>(std::floor(want[r])));
        given += counts[r];
    }
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return want[a] - std::floor(want[a]) > want[b] - std::floor(want[b]);
    });
    for (size_t i = 0; given < total; i = (i + 1) % n, ++given) ++counts[order[i]];
    // Flooring can only give out fewer than `total` (each count <= want, pinned ranks exactly the floor), except by
    // rounding in the water-filling's sums: take any excess back from the largest counts.
    while (given > total) {
        const auto big = std::max_element(counts.begin(), counts.end());
        --*big;
        --given;
    }
    return counts;
}

BatchBalancer::BatchBalancer(comm::Communicator& comm, int64_t batch_per_rank)
    : comm_(comm),
      world_(comm.size()),
      batch_(batch_per_rank),
      counts_(static_cast<size_t>(world_), batch_per_rank),
      seconds_per_sample_(static_cast<size_t>(world_), 0.0) {
    check(batch_per_rank >= 1, "BatchBalancer: the per-rank batch must be at least 1");
    stats_.samples.assign(static_cast<size_t>(world_), 0);
    stats_.batch_min = counts_;
    stats_.batch_max = counts_;
}

void BatchBalancer::record(double work_s, int64_t samples) {
    ++steps_since_exchange_;
    // A run's first step pays for cold caches and first allocations on each rank differently: not a speed.
    if (steps_recorded_++ == 0) return;
    work_s_ += work_s;
    samples_ += samples;
}

bool BatchBalancer::exchange() {
    // Slot r: rank r's work in whole microseconds and its samples. Integers below 2^53 add exactly in any order, so
    // every rank gets the same sums, and so the same split.
    std::vector<double> v(2 * static_cast<size_t>(world_), 0.0);
    const size_t me = static_cast<size_t>(comm_.rank());
    v[2 * me] = std::round(work_s_ * 1e6);
    v[2 * me + 1] = static_cast<double>(samples_);
    comm_.allreduce(std::span<double>(v), comm::ReduceOp::Sum);
    const int64_t steps = steps_since_exchange_;
    steps_since_exchange_ = 0;
    work_s_ = 0;
    samples_ = 0;
    ++stats_.exchanges;

    bool measured_all = true;
    double slowest_step_s = 0.0;
    for (size_t r = 0; r < static_cast<size_t>(world_); ++r) {
        const double work = v[2 * r] * 1e-6, samples = v[2 * r + 1];
        stats_.samples[r] += static_cast<int64_t>(samples);
        slowest_step_s = std::max(slowest_step_s, work / static_cast<double>(steps));
        if (samples <= 0 || work <= 0) {
            measured_all = measured_all && seconds_per_sample_[r] > 0;
            continue;
        }
        const double s = work / samples;
        seconds_per_sample_[r] =
            seconds_per_sample_[r] > 0 ? (1 - kNewWeight) * seconds_per_sample_[r] + kNewWeight * s : s;
    }
    if (slowest_step_s > 0)
        period_ = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(kExchangeEvery_s / slowest_step_s)), 1, kMaxPeriod);
    if (!measured_all) return false;

    // No rank below a quarter of the even share: a rank that was slow for one period keeps enough samples to be
    // measured again, and a batch never shrinks to nothing.
    std::vector<int64_t> next =
        split_by_speed(seconds_per_sample_, batch_ * world_, std::max<int64_t>(1, batch_ / 4));
    // Only a clear gain moves samples: per-step noise (a vCPU's hiccup) would otherwise move the split back and forth,
    // and each new batch shape costs its first step more (oneDNN builds primitives per shape).
    auto predicted_step = [&](const std::vector<int64_t>& c) {
        double t = 0;
        for (size_t r = 0; r < c.size(); ++r) t = std::max(t, static_cast<double>(c[r]) * seconds_per_sample_[r]);
        return t;
    };
    if (next == counts_ || predicted_step(next) > (1.0 - kMinGain) * predicted_step(counts_)) return false;
    counts_ = std::move(next);
    for (size_t r = 0; r < counts_.size(); ++r) {
        stats_.batch_min[r] = std::min(stats_.batch_min[r], counts_[r]);
        stats_.batch_max[r] = std::max(stats_.batch_max[r], counts_[r]);
    }
    return true;
}

}  // namespace ringtrain::sync

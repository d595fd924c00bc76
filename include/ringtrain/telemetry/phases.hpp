// Per-step time accounting: where each step's wall time goes (data wait, forward, backward, sync wait,
// optimizer). The trainer wraps each phase in a ScopedPhase; the summary reports the totals.
#pragma once

#include <array>
#include <chrono>
#include <string>

namespace ringtrain::telemetry {

enum class Phase { Data, Forward, Backward, SyncWait, Optimizer, Count };

const char* phase_name(Phase p);  // "data", "forward", "backward", "sync_wait", "optimizer"

class PhaseTimes {
public:
    void add(Phase p, double seconds) { s_[static_cast<size_t>(p)] += seconds; }
    double get(Phase p) const { return s_[static_cast<size_t>(p)]; }
    double total() const;
    void reset() { s_.fill(0.0); }

private:
    std::array<double, static_cast<size_t>(Phase::Count)> s_{};
};

class ScopedPhase {
public:
    ScopedPhase(PhaseTimes& t, Phase p) : t_(t), p_(p), start_(std::chrono::steady_clock::now()) {}
    ~ScopedPhase() {
        t_.add(p_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
    ScopedPhase(const ScopedPhase&) = delete;
    ScopedPhase& operator=(const ScopedPhase&) = delete;

private:
    PhaseTimes& t_;
    Phase p_;
    std::chrono::steady_clock::time_point start_;
};

// Wall-clock seconds since an arbitrary fixed point (monotonic).
double now_seconds();

}  // namespace ringtrain::telemetry

// StallInspector and StallWatchdog (see the header).
#include "ringtrain/sync/stall_inspector.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>

#include "mono_clock.hpp"

namespace ringtrain::sync {

StallInspector::StallInspector(comm::Communicator& comm, double warning_s, double abort_s)
    : comm_(comm), warning_s_(warning_s), abort_s_(abort_s) {}

std::string StallInspector::describe(const CollectiveTag& c, double age_s) {
    const double mib = static_cast<double>(c.floats) * sizeof(float) / (1024.0 * 1024.0);
    char buf[256];
    if (c.what != nullptr) {
        // Sparse steps move kilobytes and an opening allreduce a few numbers: "0.00 MiB" would say nothing.
        char size[32] = "";
        if (c.floats > 0 && c.floats < 256)
            std::snprintf(size, sizeof size, "%zu B", c.floats * sizeof(float));
        else if (c.floats > 0)
            std::snprintf(size, sizeof size, "%.*f %s", mib < 0.1 ? 1 : 2, mib < 0.1 ? mib * 1024 : mib,
                          mib < 0.1 ? "KiB" : "MiB");
        char step[32] = "";
        if (c.step >= 0)
            std::snprintf(step, sizeof step, "%sstep %lld", size[0] ? ", " : "", static_cast<long long>(c.step));
        std::snprintf(buf, sizeof buf, "%s%s%s%s%s has not completed after %.1f s", c.what,
                      size[0] || step[0] ? " (" : "", size, step, size[0] || step[0] ? ")" : "", age_s);
    } else {
        std::snprintf(buf, sizeof buf, "allreduce of bucket %zu (%.2f MiB, step %lld) has not completed after %.1f s",
                      c.bucket, mib, static_cast<long long>(c.step), age_s);
    }
    return buf;
}

std::string StallInspector::late_ranks() const {
    const std::string late = comm_.waiting_for();
    if (late.empty()) return "";
    return std::string(late.find(',') == std::string::npos ? "; waiting for rank " : "; waiting for ranks ") + late;
}

bool StallInspector::inspect(const CollectiveTag& c, double age_s, bool& warned) const {
    if (abort_s_ > 0 && age_s >= abort_s_) {
        char limit[64];
        std::snprintf(limit, sizeof limit, "%g", abort_s_);
        comm_.abort(describe(c, age_s) + late_ranks() + "; aborting the job (sync.stall_abort_s = " + limit + ")", 1);
    }
    if (warning_s_ > 0 && !warned && age_s >= warning_s_) {
        warned = true;
        std::fprintf(stderr, "ringtrain: rank %d: warning: %s%s; a rank may be stuck or dead\n", comm_.rank(),
                     describe(c, age_s).c_str(), late_ranks().c_str());
        std::fflush(stderr);
        return true;
    }
    return false;
}

void StallInspector::abort_with(const CollectiveTag& c, double age_s, const std::string& reason) const {
    comm_.abort(describe(c, age_s) + ": " + reason, 1);
}

double StallInspector::poll_period_s() const {
    double shortest = std::numeric_limits<double>::infinity();
    if (warning_s_ > 0) shortest = std::min(shortest, warning_s_);
    if (abort_s_ > 0) shortest = std::min(shortest, abort_s_);
    return std::clamp(shortest / 10, 1e-3, 1.0);
}

StallWatchdog::StallWatchdog(StallInspector inspector) : inspector_(inspector) {
    if (inspector_.enabled()) thread_ = std::thread([this] { loop(); });
}

StallWatchdog::~StallWatchdog() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    stop_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void StallWatchdog::started(const CollectiveTag& c, double start_s) {
    if (!thread_.joinable()) return;  // no limit set: nothing looks
    std::lock_guard<std::mutex> lock(mutex_);
    inflight_.active = true;
    inflight_.tag = c;
    inflight_.start_s = start_s;
    inflight_.warned = false;
    ++inflight_.generation;
}

void StallWatchdog::finished() {
    if (!thread_.joinable()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    inflight_.active = false;
}

StallWatchdog::Watch::Watch(StallWatchdog* watchdog, const CollectiveTag& c) : watchdog_(watchdog) {
    if (watchdog_ != nullptr) watchdog_->started(c, mono_s());
}

StallWatchdog::Watch::Watch(StallWatchdog* watchdog, const char* what, size_t bytes, int64_t step)
    : Watch(what != nullptr ? watchdog : nullptr, CollectiveTag{0, bytes / sizeof(float), step, what}) {}

StallWatchdog::Watch::~Watch() {
    if (watchdog_ != nullptr) watchdog_->finished();
}

void StallWatchdog::loop() {
    const double period_s = inspector_.poll_period_s();
    const auto period = std::chrono::duration<double>(period_s);
    // A wake-up this much later than asked means the process did not run in between (SIGSTOP, Slurm's suspend of
    // the job, a paused VM): that time is no rank's stall, so the collective in flight is aged without it. Without
    // this, a job suspended for longer than stall_abort_s was aborted when it was resumed.
    const double not_running_s = std::max(1.0, 5 * period_s);
    std::unique_lock<std::mutex> lock(mutex_);
    double last_wake_s = mono_s();
    while (!stop_) {
        const double now_s = mono_s();
        if (inflight_.active && now_s - last_wake_s > period_s + not_running_s)
            inflight_.start_s += now_s - last_wake_s - period_s;
        last_wake_s = now_s;
        if (inflight_.active) {
            const InFlight seen = inflight_;
            // The age as of the copy: were the process stopped after it, a collective that finished meanwhile must
            // not be judged by the clock read after the resume.
            const double age_s = now_s - seen.start_s;
            bool warned = seen.warned;
            lock.unlock();  // printing (or aborting) must not block the collective's start and end
            const bool printed = inspector_.inspect(seen.tag, age_s, warned);
            lock.lock();
            if (printed && inflight_.generation == seen.generation) inflight_.warned = true;
            if (printed) continue;  // look again at once: the abort limit may have passed while printing
        }
        stop_cv_.wait_for(lock, period, [&] { return stop_; });
    }
}

}  // namespace ringtrain::sync

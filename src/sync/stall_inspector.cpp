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
    std::snprintf(buf, sizeof buf, "allreduce of bucket %zu (%.2f MiB, step %lld) has not completed after %.1f s",
                  c.bucket, mib, static_cast<long long>(c.step), age_s);
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
    std::lock_guard<std::mutex> lock(mutex_);
    inflight_.active = true;
    inflight_.tag = c;
    inflight_.start_s = start_s;
    inflight_.warned = false;
    ++inflight_.generation;
}

void StallWatchdog::finished() {
    std::lock_guard<std::mutex> lock(mutex_);
    inflight_.active = false;
}

void StallWatchdog::loop() {
    const auto period = std::chrono::duration<double>(inspector_.poll_period_s());
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
        if (inflight_.active) {
            const InFlight seen = inflight_;
            bool warned = seen.warned;
            lock.unlock();  // printing (or aborting) must not block the collective's start and end
            const bool printed = inspector_.inspect(seen.tag, mono_s() - seen.start_s, warned);
            lock.lock();
            if (printed && inflight_.generation == seen.generation) inflight_.warned = true;
            if (printed) continue;  // look again at once: the abort limit may have passed while printing
        }
        stop_cv_.wait_for(lock, period, [&] { return stop_; });
    }
}

}  // namespace ringtrain::sync

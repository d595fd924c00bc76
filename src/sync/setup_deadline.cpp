// SetupDeadline (see the header).
#include "ringtrain/sync/setup_deadline.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace ringtrain::sync {

SetupDeadline::SetupDeadline(comm::Communicator& comm, double limit_s) : comm_(comm), limit_s_(limit_s) {
    if (limit_s_ > 0) thread_ = std::thread([this] { wait(); });
}

SetupDeadline::~SetupDeadline() { disarm(); }

void SetupDeadline::enter(const std::string& phase) {
    std::lock_guard<std::mutex> lock(mutex_);
    phase_ = phase;
}

void SetupDeadline::disarm() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        disarmed_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::string SetupDeadline::message(double limit_s, const std::string& phase) {
    char limit[64];
    std::snprintf(limit, sizeof limit, "%g", limit_s);
    return std::string("set-up has not finished after ") + limit + " s (sync.setup_timeout_s = " + limit +
           "): this rank is still " + phase +
           "; a rank may be stuck reading its data or model, or dead; aborting the job (raise sync.setup_timeout_s "
           "if set-up is just slow, 0 = no limit)";
}

void SetupDeadline::wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    // Bounded (the schema allows 1e7 s): steady_clock::now() plus a huge double duration overflows, and the wait
    // then spins instead of sleeping.
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(std::min(limit_s_, 1e8)));
    if (cv_.wait_until(lock, deadline, [this] { return disarmed_; })) return;
    const std::string text = message(limit_s_, phase_);
    lock.unlock();  // the main thread may still enter a phase while the job goes down
    comm_.abort(text, kExitCode);
}

}  // namespace ringtrain::sync

// SetupDeadline: set-up (reading data, building the model, the start-up agreement) must finish within
// sync.setup_timeout_s, or the job is taken down. A rank stuck before the agreement (a data file on a hung file
// system, a FIFO nobody writes) would otherwise keep every other rank waiting in the agreement forever; no
// collective is in flight yet, so the gradient stall watchdog cannot see it. Each rank runs its own deadline: the
// waiting ranks and the stuck one abort, whichever is first, naming the key and what this rank was doing.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::sync {

class SetupDeadline {
public:
    // Exit code of the abort: 1, not 2. A set-up that does not finish is a fault of the environment (a stuck file
    // system, a rank that never started), which no check of the input could have named, like a stalled collective.
    static constexpr int kExitCode = 1;

    // Starts a thread that calls comm.abort after `limit_s` unless disarmed first; limit_s <= 0: off, no thread.
    SetupDeadline(comm::Communicator& comm, double limit_s);
    ~SetupDeadline();  // disarms
    SetupDeadline(const SetupDeadline&) = delete;
    SetupDeadline& operator=(const SetupDeadline&) = delete;

    // What this rank does from now on ("reading its data and building the model"), for the message.
    void enter(const std::string& phase);
    // Set-up is over: stops and joins the thread.
    void disarm();

    // "set-up has not finished after 5 s (sync.setup_timeout_s = 5): this rank is still <phase>; ..."
    static std::string message(double limit_s, const std::string& phase);

private:
    void wait();

    comm::Communicator& comm_;
    const double limit_s_;
    std::mutex mutex_;
    std::condition_variable cv_;
    bool disarmed_ = false;
    std::string phase_ = "setting up";
    std::thread thread_;
};

}  // namespace ringtrain::sync

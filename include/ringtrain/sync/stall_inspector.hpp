// Stall detection for gradient collectives, as its own class (Horovod's stall_inspector.h): a collective that has not
// completed after stall_warning_s is reported once on stderr, after stall_abort_s the whole job is taken down
// (comm.abort, MPI_Abort), because a dead or stuck rank otherwise hangs every other rank silently. Every path prints
// the same texts, which scripts and tests match.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::sync {

// What a stall message names.
struct CollectiveTag {
    size_t bucket = 0;
    size_t floats = 0;  // the bucket's float32 payload (another collective's: its bytes / 4)
    int64_t step = 0;            // with `what`: < 0 = not known (left out)
    const char* what = nullptr;  // a collective that is not a bucket's allreduce ("the sparse gradient exchange")
};

class StallInspector {
public:
    // `comm` (borrowed) prints the rank and aborts the job. A limit <= 0 is off.
    StallInspector(comm::Communicator& comm, double warning_s, double abort_s);

    bool enabled() const { return warning_s_ > 0 || abort_s_ > 0; }
    // One look at `c`, in flight for `age_s`: past abort_s the job is aborted (never returns); past warning_s the
    // warning is printed unless `warned` (then set). Returns true when it printed the warning now.
    bool inspect(const CollectiveTag& c, double age_s, bool& warned) const;
    // Takes the job down with the stall text and `reason` (an error that means the collective never completes).
    void abort_with(const CollectiveTag& c, double age_s, const std::string& reason) const;
    // How often a poller should look: a tenth of the shorter limit, 1 ms to 1 s (so a stall is reported at most
    // that late, for one wake-up per period).
    double poll_period_s() const;
    // "allreduce of bucket B (X MiB, step S) has not completed after T s", or with `what` in place of
    // "allreduce of bucket B" (the size in bytes below 1 KiB, in KiB below 0.1 MiB; size and step left out at 0 / < 0)
    static std::string describe(const CollectiveTag& c, double age_s);

private:
    // "; waiting for rank 1" where the communicator knows who is late, else "".
    std::string late_ranks() const;

    comm::Communicator& comm_;
    double warning_s_, abort_s_;
};

// Watches the host paths' collective in flight from a thread of its own (none when the inspector is off). It polls
// instead of being woken per collective: a wake-up per step costs a context switch on the rank's core between
// backward and every allreduce (bench/RESULTS.md, "GradientSync: the measurements behind its choices").
class StallWatchdog {
public:
    explicit StallWatchdog(StallInspector inspector);
    ~StallWatchdog();  // stops and joins the thread
    StallWatchdog(const StallWatchdog&) = delete;
    StallWatchdog& operator=(const StallWatchdog&) = delete;

    // One collective at a time: `c` started at `start_s` (mono seconds) / has ended.
    void started(const CollectiveTag& c, double start_s);
    void finished();

    // started(c, now) for the life of a scope, finished() at its end; nothing with no watchdog.
    class Watch {
    public:
        Watch(StallWatchdog* watchdog, const CollectiveTag& c);
        // A collective named `what` moving `bytes` of this rank's at global step `step` (< 0: not known); nothing
        // with `what` null.
        Watch(StallWatchdog* watchdog, const char* what, size_t bytes, int64_t step);
        ~Watch();
        Watch(const Watch&) = delete;
        Watch& operator=(const Watch&) = delete;

    private:
        StallWatchdog* watchdog_;
    };

private:
    void loop();

    StallInspector inspector_;
    std::mutex mutex_;
    std::condition_variable stop_cv_;
    bool stop_ = false;
    struct InFlight {
        bool active = false;
        CollectiveTag tag;
        double start_s = 0;
        bool warned = false;
        uint64_t generation = 0;  // tells a later collective from the one a warning was printed for
    } inflight_;
    std::thread thread_;
};

}  // namespace ringtrain::sync

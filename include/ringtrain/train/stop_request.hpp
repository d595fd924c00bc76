// StopRequest: a graceful stop on a signal. SIGTERM, SIGINT and one early-warning signal (train.stop_signal, SIGUSR1
// by default, which Slurm sends ahead of the time limit with `#SBATCH --signal=B:USR1@120`) only set a flag; the
// training loop asks the ranks at its next step boundary whether any rank has it set (the flag rides as a vote in the
// gradient allreduce: sync::SyncOptions::vote), and when they agree writes a checkpoint, finishes its outputs and
// leaves with kStoppedExitCode. Two escape hatches end the process at once with kHardStopExitCode and a message on
// stderr: a second signal, and no agreement within the grace period (a rank stuck or gone; a watchdog thread).
//
// The handlers are process-wide, so one StopRequest may be live at a time (RAII: the constructor installs them with
// sigaction, the destructor restores the previous ones). Usable by any training loop:
//     StopRequest stop(parse_stop_signal(plan.train.stop_signal).value(), plan.train.stop_grace_s, rank);
//     options.vote = &stop.flag();  ...  if (agreed) { stop.agreed(); checkpoint; return kStoppedExitCode; }
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace ringtrain::train {

// Exit codes next to 0 (done), 1 (failure) and 2 (bad input).
inline constexpr int kStoppedExitCode = 3;    // stopped early by a signal, checkpoint written: resume=auto continues
inline constexpr int kHardStopExitCode = 4;   // second signal or grace period over: ended at once, no new checkpoint

// The spellings train.stop_signal accepts: "SIGUSR1" and "USR1" alike for each signal a scheduler sends ahead of a
// stop, and "none".
const std::vector<std::string>& stop_signal_spellings();
// The signal number for one of those spellings (0 for "none"); nullopt for anything else.
std::optional<int> parse_stop_signal(std::string_view name);
// "SIGUSR1" for SIGUSR1, "signal 42" for a number without a name here.
std::string signal_name(int signo);

class StopRequest {
public:
    // Handles SIGTERM, SIGINT and `extra_signal` (0: none) from now on. grace_s > 0 starts the watchdog: once a
    // signal has come, agreed() must follow within grace_s or the process ends (kHardStopExitCode). `rank` names
    // this process in the messages. Throws Error when another StopRequest is live.
    StopRequest(int extra_signal, double grace_s, int rank);
    ~StopRequest();
    StopRequest(const StopRequest&) = delete;
    StopRequest& operator=(const StopRequest&) = delete;

    // Nonzero (the signal's number) once a handled signal has come: what a rank votes with.
    const std::atomic<int>& flag() const;
    bool requested() const { return signal() != 0; }
    int signal() const { return flag().load(); }
    // The ranks agreed to stop: the watchdog stands down (the grace period covers reaching the agreement only).
    void agreed();

private:
    void watch(double grace_s, int rank);

    std::vector<int> signals_;
    std::thread watchdog_;
};

}  // namespace ringtrain::train

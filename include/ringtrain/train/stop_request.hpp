// StopRequest: a graceful stop on a signal. SIGTERM, SIGINT and one early-warning signal (train.stop_signal, SIGUSR1
// by default, which Slurm sends ahead of the time limit with `#SBATCH --signal=B:USR1@120`) only set a flag; the
// training loop asks the ranks at its next step boundary whether any rank has it set (the flag rides as a vote in the
// gradient allreduce: sync::SyncOptions::vote), and when they agree writes a checkpoint, finishes its outputs and
// leaves with kStoppedExitCode. Two escape hatches end the process at once with kHardStopExitCode and a message on
// stderr: a second signal, and no agreement within the grace period (a rank stuck or gone; a watchdog thread).
//
// The handlers are process-wide, so one StopRequest may be live at a time (RAII: the constructor installs them with
// sigaction, the destructor restores the previous ones). Usable by any training loop:
//     StopRequest stop(stop_signal_number(plan.train.stop_signal), plan.train.stop_grace_s, rank);
//     gradient_sync.set_vote(&stop.flag());                 // free: rides in the gradient allreduce
//     ... after each step, on every rank:
//     bool stop_now = gradient_sync.carries_vote() ? gradient_sync.vote_any() : any_rank_requested(comm, stop);
//     if (stop_now) { stop.agreed(); int signo = agreed_signal(comm, stop); checkpoint; exit kStoppedExitCode; }
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::train {

// Exit codes next to 0 (done), 1 (failure) and 2 (bad input).
inline constexpr int kStoppedExitCode = 3;    // stopped early by a signal, checkpoint written: resume=auto continues
inline constexpr int kHardStopExitCode = 4;   // second signal or grace period over: ended at once, no new checkpoint

// The spellings train.stop_signal accepts: "SIGUSR1" and "USR1" alike for each signal a scheduler sends ahead of a
// stop, and "none".
const std::vector<std::string>& stop_signal_spellings();
// The signal number for one of those spellings (0 for "none"); nullopt for anything else.
std::optional<int> parse_stop_signal(std::string_view name);
// The same, for train.stop_signal's value: throws InputError naming the key for anything else (what both training
// paths call, so a spelling the schema lets through but the parser does not is exit 2, never a crash).
int stop_signal_number(const std::string& spelling);
// "SIGUSR1" for SIGUSR1, "signal 42" for a number without a name here.
std::string signal_name(int signo);

// What ~StopRequest does with the handlers after a stop signal came: restore the earlier ones (a library, a test
// process that goes on), or keep them (a process that exits right after the run: a second signal while it writes its
// summary then still ends it with kHardStopExitCode and its line, not with the default action's silent 128+N).
enum class AfterStop { RestoreHandlers, KeepHandlers };

class StopRequest {
public:
    // Handles SIGTERM, SIGINT and `extra_signal` (0: none) from now on. grace_s > 0 starts the watchdog: once a
    // signal has come, agreed() must follow within grace_s or the process ends (kHardStopExitCode). `rank` names
    // this process in the messages. Throws Error when another StopRequest is live.
    StopRequest(int extra_signal, double grace_s, int rank, AfterStop after = AfterStop::RestoreHandlers);
    ~StopRequest();
    StopRequest(const StopRequest&) = delete;
    StopRequest& operator=(const StopRequest&) = delete;

    // Nonzero (the signal's number) once a handled signal has come: what a rank votes with.
    const std::atomic<int>& flag() const;
    bool requested() const { return signal() != 0; }
    int signal() const { return flag().load(); }
    // The ranks agreed to stop: the watchdog stands down (the grace period covers reaching the agreement only).
    void agreed();
    // The loop is over and will not vote again (every rank at the same point). A signal that came and was not agreed
    // on is said to be overtaken by the run's end, and the watchdog stands down; one that comes later is said so
    // too, with no grace deadline (the run finishes by itself). `agreed_at_last_step`: the ranks did agree, at the
    // step where the run ends anyway, and the line says that instead. Once: later calls do nothing.
    void votes_over(bool agreed_at_last_step = false);

private:
    AfterStop after_;
    int rank_ = 0;
    void watch(double grace_s, int rank);

    std::vector<int> signals_;
    std::thread watchdog_;
};

// The agreement where no vote rides in a collective the loop already runs: a one-value max-allreduce of the flag.
// Collective: every rank at the same step. True on every rank when any rank got a signal.
bool any_rank_requested(comm::Communicator& comm, const StopRequest& stop);
// Once the ranks agreed to stop: the signal to report, the highest number any rank got (a rank that got none gives
// 0). Collective, once per run, so it costs nothing per step.
int agreed_signal(comm::Communicator& comm, const StopRequest& stop);

}  // namespace ringtrain::train

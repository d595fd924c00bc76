// StopRequest: the signal handlers, the flag they set and the grace-period watchdog (see the header).
#include "ringtrain/train/stop_request.hpp"

#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <span>

#include "ringtrain/core/error.hpp"

namespace ringtrain::train {

namespace {

// What the handler touches. A signal handler can only reach process-wide state, so this is the one place such state
// lives; StopRequest's constructor and destructor own it (one live StopRequest at a time).
struct HandlerState {
    std::atomic<int> signal{0};      // the first handled signal's number, 0 until then
    std::atomic<bool> live{false};   // a StopRequest exists
    std::atomic<bool> closing{false};
    std::atomic<bool> agreed{false};      // agreed() was called
    std::atomic<bool> votes_over{false};  // votes_over() was called: the loop will not vote again
    sem_t woken;  // posted by the first signal (sem_post is async-signal-safe) and by the destructor
    sem_t done;   // posted by agreed() and by the destructor
    char second_signal_message[256];
    size_t second_signal_length = 0;
    static constexpr int kMaxSignals = 3;
    int handled[kMaxSignals];
    struct sigaction previous[kMaxSignals];
    int count = 0;
};
static_assert(std::atomic<int>::is_always_lock_free, "the handler needs a lock-free flag");

HandlerState g_state;

// Async-signal-safe: an atomic exchange, sem_post, write and _exit only.
extern "C" void on_stop_signal(int signo) {
    int none = 0;
    if (g_state.signal.compare_exchange_strong(none, signo)) {
        sem_post(&g_state.woken);
        return;
    }
    const ssize_t w = write(STDERR_FILENO, g_state.second_signal_message, g_state.second_signal_length);
    (void)w;
    _exit(kHardStopExitCode);
}

struct SignalSpelling {
    const char* name;  // without "SIG"
    int number;
};

// Signals a scheduler sends ahead of a stop (Slurm's --signal, a batch system's warning); SIGTERM and SIGINT are
// always handled and may be named too.
constexpr SignalSpelling kSignals[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"INT", SIGINT},
                                       {"HUP", SIGHUP},   {"QUIT", SIGQUIT}, {"ALRM", SIGALRM}, {"XCPU", SIGXCPU}};

}  // namespace

const std::vector<std::string>& stop_signal_spellings() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (const SignalSpelling& s : kSignals) {
            v.push_back(std::string("SIG") + s.name);
            v.push_back(s.name);
        }
        v.push_back("none");
        return v;
    }();
    return names;
}

std::optional<int> parse_stop_signal(std::string_view name) {
    if (name == "none") return 0;
    const std::string_view bare = name.substr(0, 3) == "SIG" ? name.substr(3) : name;
    for (const SignalSpelling& s : kSignals)
        if (bare == s.name) return s.number;
    return std::nullopt;
}

int stop_signal_number(const std::string& spelling) {
    const std::optional<int> n = parse_stop_signal(spelling);
    if (!n) throw InputError("train.stop_signal: '" + spelling + "' is not a signal name; use SIGUSR1, USR1, ... or none");
    return *n;
}

std::string signal_name(int signo) {
    for (const SignalSpelling& s : kSignals)
        if (s.number == signo) return std::string("SIG") + s.name;
    return "signal " + std::to_string(signo);
}

StopRequest::StopRequest(int extra_signal, double grace_s, int rank, AfterStop after) : after_(after), rank_(rank) {
    bool idle = false;
    if (!g_state.live.compare_exchange_strong(idle, true))
        throw Error("internal: a second StopRequest while one is live (signal handlers are process-wide)");
    HandlerState& g = g_state;
    g.signal.store(0);
    g.closing.store(false);
    g.agreed.store(false);
    g.votes_over.store(false);
    sem_init(&g.woken, 0, 0);
    sem_init(&g.done, 0, 0);
    const int n = std::snprintf(g.second_signal_message, sizeof g.second_signal_message,
                                "ringtrain: rank %d: a second stop signal: exiting at once without a checkpoint "
                                "(exit %d); checkpoint.resume=auto continues from the last checkpoint\n",
                                rank, kHardStopExitCode);
    g.second_signal_length = static_cast<size_t>(std::clamp(n, 0, static_cast<int>(sizeof g.second_signal_message) - 1));
    signals_ = {SIGTERM, SIGINT};
    if (extra_signal != 0 && extra_signal != SIGTERM && extra_signal != SIGINT) signals_.push_back(extra_signal);
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // MPI's and the loader's system calls go on rather than fail with EINTR
    g.count = 0;
    for (int s : signals_) {
        g.handled[g.count] = s;
        sigaction(s, &sa, &g.previous[g.count]);
        ++g.count;
    }
    if (grace_s > 0) watchdog_ = std::thread([this, grace_s, rank] { watch(grace_s, rank); });
}

StopRequest::~StopRequest() {
    HandlerState& g = g_state;
    if (after_ == AfterStop::RestoreHandlers || g.signal.load() == 0)
        for (int i = 0; i < g.count; ++i) sigaction(g.handled[i], &g.previous[i], nullptr);
    g.count = 0;
    g.closing.store(true);
    sem_post(&g.woken);
    sem_post(&g.done);
    if (watchdog_.joinable()) watchdog_.join();
    sem_destroy(&g.woken);
    sem_destroy(&g.done);
    g.live.store(false);
}

const std::atomic<int>& StopRequest::flag() const { return g_state.signal; }

void StopRequest::agreed() {
    g_state.agreed.store(true);
    sem_post(&g_state.done);
}

void StopRequest::votes_over(bool agreed_at_last_step) {
    HandlerState& g = g_state;
    if (g.votes_over.exchange(true)) return;  // said once: the loop may end its votes early (its last step's vote)
    const int sig = g.signal.load();
    if (sig == 0 || g.agreed.load()) return;
    // A signal came during the last step (or the last vote's step), or the ranks agreed on it at the step where the
    // run ends anyway: no boundary is left to stop at, and the run's end is closer than any stop would be.
    std::fprintf(stderr,
                 "ringtrain: rank %d: %s %s: it finishes as usual (evaluation, checkpoint, summary); a second signal "
                 "ends at once\n",
                 rank_,
                 agreed_at_last_step ? "the ranks agreed to stop on" : "the run reached its last step before the "
                                                                       "ranks agreed to stop on",
                 agreed_at_last_step ? (signal_name(sig) + " at the run's last step").c_str() : signal_name(sig).c_str());
    std::fflush(stderr);
    sem_post(&g.done);  // the watchdog stands down: no agreement is coming
}

// Waits for the first signal, then for agreed() for up to grace_s; past that, ends the process (a rank that never
// reaches the next step boundary would otherwise hold the job until the scheduler kills it, checkpoint-less anyway).
void StopRequest::watch(double grace_s, int rank) {
    HandlerState& g = g_state;
    while (sem_wait(&g.woken) != 0 && errno == EINTR) {
    }
    if (g.closing.load()) return;
    // Said at once, from this thread (not the handler): when mpirun or Slurm tears a job down after a rank died, it
    // sends SIGTERM and kills a second later, so this line is the survivors' only word on what happened.
    // SIGTERM is also how mpirun and srun end the other ranks when one fails: say so, or the survivors' lines
    // would read as a preemption while the failing rank's line (the reason) scrolls past among them.
    const int sig = g.signal.load();
    // After the loop nothing votes any more, and what is left (the final evaluation, checkpoint and summary) is
    // watched as collectives are: no grace deadline, the run ends by itself.
    const bool after_last_vote = g.votes_over.load();
    char what_follows[160];
    if (after_last_vote)
        std::snprintf(what_follows, sizeof what_follows,
                      " after the run's last step: it finishes its evaluation, checkpoint and summary, then exits");
    else
        std::snprintf(what_follows, sizeof what_follows,
                      ": stopping at the next step boundary with a checkpoint (exit %d)", kStoppedExitCode);
    std::fprintf(stderr, "ringtrain: rank %d: %s received%s%s; a second signal ends at once\n", rank,
                 signal_name(sig).c_str(),
                 sig == SIGTERM ? " (from the scheduler, from mpirun after a Ctrl-C, or from the launcher ending the "
                                  "job because another rank failed: that rank's message says why)"
                                : "",
                 what_follows);
    std::fflush(stderr);
    if (after_last_vote) return;
    timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    const double whole = std::floor(grace_s);
    deadline.tv_sec += static_cast<time_t>(whole);
    deadline.tv_nsec += static_cast<long>((grace_s - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
    }
    int r;
    while ((r = sem_clockwait(&g.done, CLOCK_MONOTONIC, &deadline)) != 0 && errno == EINTR) {
    }
    if (r == 0 || g.closing.load()) return;
    std::fprintf(stderr,
                 "ringtrain: rank %d: %s came %g s ago and the ranks did not agree to stop within train.stop_grace_s "
                 "(a rank is stuck or gone): exiting now without a checkpoint (exit %d); checkpoint.resume=auto "
                 "continues from the last checkpoint\n",
                 rank, signal_name(g.signal.load()).c_str(), grace_s, kHardStopExitCode);
    std::fflush(stderr);
    _exit(kHardStopExitCode);
}

bool any_rank_requested(comm::Communicator& comm, const StopRequest& stop) {
    double vote = stop.requested() ? 1.0 : 0.0;
    if (comm.size() > 1) comm.allreduce(std::span<double>(&vote, 1), comm::ReduceOp::Max);
    return vote > 0;
}

int agreed_signal(comm::Communicator& comm, const StopRequest& stop) {
    double signo = static_cast<double>(stop.signal());
    if (comm.size() > 1) comm.allreduce(std::span<double>(&signo, 1), comm::ReduceOp::Max);
    return static_cast<int>(signo);
}

}  // namespace ringtrain::train

// StopRequest on its own: the spellings train.stop_signal accepts, the flag a handled signal sets, the handlers put
// back afterwards, and the two ways it ends a process at once (a second signal; no agreement within the grace
// period), each in a forked child so the test process survives.
#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "ringtrain/core/error.hpp"
#include "ringtrain/train/stop_request.hpp"

using namespace ringtrain::train;

namespace {

struct ChildResult {
    int exit_code = -1;  // 128 + signal when killed
    std::string stderr_text;
};

// Runs `body` in a forked child with stderr in a file; the child exits 0 when body returns.
template <class F>
ChildResult in_child(F body) {
    char path[] = "/tmp/ringtrain-stop-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(fd, STDERR_FILENO);
        body();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    close(fd);
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::remove(path);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), ss.str()};
}

void (*current_handler(int signo))(int) {
    struct sigaction now {};
    sigaction(signo, nullptr, &now);
    return now.sa_handler;
}

}  // namespace

TEST_CASE("train.stop_signal spellings: with and without SIG, and none", "[stop]") {
    CHECK(parse_stop_signal("SIGUSR1") == SIGUSR1);
    CHECK(parse_stop_signal("USR1") == SIGUSR1);
    CHECK(parse_stop_signal("SIGUSR2") == SIGUSR2);
    CHECK(parse_stop_signal("TERM") == SIGTERM);
    CHECK(parse_stop_signal("none") == 0);
    CHECK(!parse_stop_signal("usr1").has_value());
    CHECK(!parse_stop_signal("SIG").has_value());
    CHECK(!parse_stop_signal("SIGKILL").has_value());  // cannot be handled
    CHECK(!parse_stop_signal("").has_value());
    for (const std::string& s : stop_signal_spellings()) CHECK(parse_stop_signal(s).has_value());
    CHECK(signal_name(SIGUSR1) == "SIGUSR1");
    CHECK(signal_name(SIGTERM) == "SIGTERM");
    // What both training paths call: bad input (exit 2) naming the key, never an empty optional's access.
    CHECK(stop_signal_number("USR2") == SIGUSR2);
    CHECK(stop_signal_number("none") == 0);
    CHECK_THROWS_AS(stop_signal_number("SIGKILL"), ringtrain::InputError);
    CHECK_THROWS_WITH(stop_signal_number("SIGKILL"), Catch::Contains("train.stop_signal: 'SIGKILL' is not a signal name"));
}

TEST_CASE("a handled signal only sets the flag; the previous handlers come back afterwards", "[stop]") {
    const auto before_usr1 = current_handler(SIGUSR1);
    const auto before_term = current_handler(SIGTERM);
    {
        StopRequest stop(SIGUSR1, 0, 0);
        CHECK(!stop.requested());
        CHECK(current_handler(SIGUSR1) != before_usr1);
        std::raise(SIGUSR1);
        CHECK(stop.requested());
        CHECK(stop.signal() == SIGUSR1);
        CHECK(stop.flag().load() == SIGUSR1);
        // One at a time: the handlers are the process's.
        CHECK_THROWS_AS(StopRequest(SIGUSR2, 0, 0), ringtrain::Error);
    }
    CHECK(current_handler(SIGUSR1) == before_usr1);
    CHECK(current_handler(SIGTERM) == before_term);
    // A new one starts clear.
    StopRequest again(0, 0, 0);
    CHECK(!again.requested());
    std::raise(SIGINT);
    CHECK(again.signal() == SIGINT);
}

TEST_CASE("with stop_signal none, that signal keeps its default action", "[stop]") {
    const ChildResult r = in_child([] {
        StopRequest stop(0, 0, 0);
        std::raise(SIGUSR1);  // not handled: the default ends the process
        std::this_thread::sleep_for(std::chrono::seconds(5));
    });
    CHECK(r.exit_code == 128 + SIGUSR1);
}

TEST_CASE("a second signal ends the process at once with exit 4 and one line", "[stop]") {
    const ChildResult r = in_child([] {
        StopRequest stop(SIGUSR1, 0, 3);
        std::raise(SIGUSR1);
        std::raise(SIGTERM);
        std::this_thread::sleep_for(std::chrono::seconds(5));
    });
    CHECK(r.exit_code == kHardStopExitCode);
    CHECK(r.stderr_text.find("rank 3: a second stop signal: exiting at once without a checkpoint") != std::string::npos);
}

TEST_CASE("no agreement within the grace period ends the process with exit 4; agreed() in time does not", "[stop]") {
    const auto t0 = std::chrono::steady_clock::now();
    const ChildResult late = in_child([] {
        StopRequest stop(SIGUSR1, 0.3, 1);
        std::raise(SIGUSR1);
        std::this_thread::sleep_for(std::chrono::seconds(10));  // a rank that never reaches a step boundary
    });
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(late.exit_code == kHardStopExitCode);
    CHECK(waited < 5.0);
    CHECK(late.stderr_text.find("rank 1: SIGUSR1 came 0.3 s ago and the ranks did not agree to stop within "
                                "train.stop_grace_s") != std::string::npos);

    const ChildResult in_time = in_child([] {
        StopRequest stop(SIGUSR1, 0.3, 1);
        std::raise(SIGUSR1);
        stop.agreed();
        std::this_thread::sleep_for(std::chrono::milliseconds(800));  // past the grace period: the checkpoint's time
    });
    CHECK(in_time.exit_code == 0);
    // Only the line said on arrival (the survivors' word when a launcher tears a job down), no grace-period message.
    CHECK(in_time.stderr_text ==
          "ringtrain: rank 1: SIGUSR1 received: stopping at the next step boundary with a checkpoint (exit 3); a "
          "second signal ends at once\n");
}

TEST_CASE("a signal the run's end overtakes does not end the process: no vote is left to agree on", "[stop]") {
    // A signal during the last step, then the loop ends (votes_over): the run finishes as usual, past the grace period
    // (its final evaluation and summary); before, the watchdog ended it with exit 4 and no summary.
    const ChildResult during = in_child([] {
        StopRequest stop(SIGUSR1, 0.3, 1);
        std::raise(SIGUSR1);
        stop.votes_over();
        std::this_thread::sleep_for(std::chrono::milliseconds(800));
    });
    CHECK(during.exit_code == 0);
    CHECK(during.stderr_text.find("rank 1: the run reached its last step before the ranks agreed to stop on SIGUSR1: "
                                  "it finishes as usual") != std::string::npos);
    // A signal after the loop: said, no deadline.
    const ChildResult after = in_child([] {
        StopRequest stop(SIGUSR1, 0.3, 1);
        stop.votes_over();
        std::raise(SIGUSR1);
        std::this_thread::sleep_for(std::chrono::milliseconds(800));
    });
    CHECK(after.exit_code == 0);
    CHECK(after.stderr_text == "ringtrain: rank 1: SIGUSR1 received after the run's last step: it finishes its "
                               "evaluation, checkpoint and summary, then exits; a second signal ends at once\n");
    // An agreed stop is not said to be overtaken.
    const ChildResult agreed = in_child([] {
        StopRequest stop(SIGUSR1, 0.3, 1);
        std::raise(SIGUSR1);
        stop.agreed();
        stop.votes_over();
    });
    CHECK(agreed.exit_code == 0);
    CHECK(agreed.stderr_text.find("reached its last step") == std::string::npos);
}

TEST_CASE("a SIGTERM's line says it may be the launcher ending the job after another rank failed", "[stop]") {
    // mpirun and srun end the other ranks with SIGTERM when one fails: the survivors must not read as preempted.
    const ChildResult r = in_child([] {
        StopRequest stop(0, 0.3, 2);  // SIGTERM is always handled
        std::raise(SIGTERM);
        stop.agreed();
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
    });
    CHECK(r.exit_code == 0);
    CHECK(r.stderr_text ==
          "ringtrain: rank 2: SIGTERM received (from the scheduler, from mpirun after a Ctrl-C, or from the launcher "
          "ending the job because another rank failed: that rank's message says why): stopping at the next step boundary with a checkpoint "
          "(exit 3); a second signal ends at once\n");
}

TEST_CASE("a process that exits after the run keeps the handlers after a stop: a second signal is still exit 4",
          "[stop]") {
    // Two quick Ctrl-Cs: the first stops the run; the second, while the summary is written after train() returned,
    // used to meet the default action (130, no word).
    const ChildResult r = in_child([] {
        { StopRequest stop(0, 0, 1, AfterStop::KeepHandlers); std::raise(SIGINT); stop.agreed(); }
        std::raise(SIGINT);
        std::this_thread::sleep_for(std::chrono::seconds(5));
    });
    CHECK(r.exit_code == kHardStopExitCode);
    CHECK_THAT(r.stderr_text, Catch::Contains("rank 1: a second stop signal: exiting at once without a checkpoint"));
    // Without a signal the earlier handlers come back, kept or not (here the default action).
    const ChildResult quiet = in_child([] {
        { StopRequest stop(0, 0, 1, AfterStop::KeepHandlers); }
        std::raise(SIGINT);
        std::this_thread::sleep_for(std::chrono::seconds(5));
    });
    CHECK(quiet.exit_code == 128 + SIGINT);
}

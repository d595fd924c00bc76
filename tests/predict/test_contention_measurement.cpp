// predict::profile_while_allreducing over a stand-in for two ranks: the allreduces beside the profile, their stop
// after the same allreduce on every rank, the factors, and a failing profile. Times are sleeps of 2 and 20 ms, so
// the medians hold against a busy machine's scheduling (a late wake-up lengthens one sample, not the median).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/predict/contention_measurement.hpp"

#include "rank0_of_two.hpp"

namespace {

using namespace std::chrono_literals;

// Rank 0 of two. The other rank holds the same numbers as this one, except the last (the done flag), which it
// raises `other_lag` allreduces after this rank first raised its own. An allreduce takes 2 ms, or 20 ms while
// `busy` (the profile runs beside it).
class TwoRanks final : public rt_predict_test::Rank0OfTwo {
public:
    explicit TwoRanks(int other_lag) : other_lag_(other_lag) {}
    std::atomic<bool> busy{false};
    int calls = 0, calls_after_mine_done = 0;
    size_t floats = 0;

    std::string backend() const override { return "two-ranks"; }
    using Rank0OfTwo::allreduce;
    void allreduce(std::span<float> data, ringtrain::comm::ReduceOp) override {
        ++calls;
        floats = data.size();
        std::this_thread::sleep_for(busy.load() ? 20ms : 2ms);
        const float mine = data.back();
        if (mine > 0) ++calls_after_mine_done;
        const float other = mine > 0 && calls_after_mine_done > other_lag_ ? 1.0f : 0.0f;
        for (float& x : data) x += x;  // the other rank's copy
        data.back() = mine + other;
    }

private:
    int other_lag_;
};

ringtrain::train::StepProfile step_with_backward(double backward_s) {
    ringtrain::train::StepProfile p;
    p.backward_s = backward_s;
    return p;
}

}  // namespace

TEST_CASE("profile_while_allreducing: allreduces beside the profile, alone first; all ranks stop together",
          "[predict]") {
    TwoRanks comm(3);  // the other rank's profile ends 3 allreduces after this one's
    const auto loaded = ringtrain::predict::profile_while_allreducing(comm, 4096, 5, [&] {
        comm.busy = true;
        std::this_thread::sleep_for(300ms);
        comm.busy = false;
        return step_with_backward(0.03);
    });
    CHECK(comm.floats == 1024);
    CHECK(loaded.profile.backward_s == 0.03);
    // Alone: 2 ms (6 allreduces, the first left out). Beside: 20 ms, about 15 in 300 ms. Sleeps only end late, so
    // the bounds above are loose (a loaded machine's medians); the ones below are the sleeps themselves.
    CHECK(loaded.alone_s >= 2e-3);
    CHECK(loaded.during_s >= 20e-3);
    CHECK(loaded.during_s > 2 * loaded.alone_s);
    CHECK(loaded.allreduces >= 2);
    CHECK(loaded.allreduces <= 17);  // 300 ms of 20 ms sleeps, plus one begun before the profile marked itself busy
    // This rank raised its flag, then went on until the other's came too: its 3 more, and the one that carried it.
    CHECK(comm.calls_after_mine_done == 4);
    CHECK(comm.calls == 6 + loaded.allreduces + 4);

    const auto c = ringtrain::predict::contention_from(step_with_backward(0.01), loaded);
    REQUIRE(c);
    CHECK(c->compute == Approx(3.0));
    CHECK(c->communication == Approx(loaded.during_s / loaded.alone_s));
}

TEST_CASE("profile_while_allreducing: a failing profile is rethrown once every rank left the loop", "[predict]") {
    TwoRanks comm(2);
    CHECK_THROWS_WITH(ringtrain::predict::profile_while_allreducing(comm, 4096, 1,
                                                                    [&]() -> ringtrain::train::StepProfile {
                                                                        std::this_thread::sleep_for(30ms);
                                                                        throw ringtrain::InputError("bad data");
                                                                    }),
                      "bad data");
    CHECK(comm.calls_after_mine_done == 3);
}

TEST_CASE("contention_from and contention_bytes", "[predict]") {
    ringtrain::predict::LoadedProfile loaded;
    loaded.profile = step_with_backward(0.009);  // faster than alone: noise, not a speed-up
    loaded.alone_s = 2e-3;
    loaded.during_s = 1e-3;
    loaded.allreduces = 3;
    const auto c = ringtrain::predict::contention_from(step_with_backward(0.01), loaded);
    REQUIRE(c);
    CHECK(c->compute == 1.0);
    CHECK(c->communication == 1.0);
    CHECK_FALSE(c->any());
    loaded.allreduces = 0;  // nothing measured beside the profile, or a time of 0: no factors
    CHECK_FALSE(ringtrain::predict::contention_from(step_with_backward(0.01), loaded));
    loaded.allreduces = 3;
    loaded.alone_s = 0;
    CHECK_FALSE(ringtrain::predict::contention_from(step_with_backward(0.01), loaded));

    ringtrain::train::StepProfile p;
    p.gradients = {{"w", 1000000, 0.0}, {"b", 200000, 0.0}};
    CHECK(ringtrain::predict::contention_bytes(p) == 4.8e6);
    p.gradients = {{"w", 10, 0.0}};
    CHECK(ringtrain::predict::contention_bytes(p) == 4096);
    p.gradients = {{"w", 100000000, 0.0}};
    CHECK(ringtrain::predict::contention_bytes(p) == 16.0 * 1048576);
}

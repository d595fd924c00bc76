// LrSchedule: world-size scaling, warmup from the unscaled rate, constant / step / cosine decay.
#include <catch2/catch.hpp>

#include <cmath>

#include "ringtrain/core/error.hpp"
#include "ringtrain/optim/schedule.hpp"

using namespace ringtrain;
using namespace ringtrain::optim;

namespace {

ScheduleOptions opts(float lr, const std::string& scaling, const std::string& decay) {
    ScheduleOptions o;
    o.lr = lr;
    o.scaling = scaling;
    o.decay = decay;
    return o;
}

Approx near(double v) { return Approx(v).epsilon(1e-6).margin(1e-9); }

}  // namespace

TEST_CASE("scaling rules at world size 4", "[optim][schedule]") {
    REQUIRE(LrSchedule(opts(0.1f, "linear", "constant"), 4).peak() == near(0.4));
    REQUIRE(LrSchedule(opts(0.1f, "sqrt", "constant"), 4).peak() == near(0.2));
    REQUIRE(LrSchedule(opts(0.1f, "none", "constant"), 4).peak() == near(0.1));
    // World size 1 leaves every rule at lr; sqrt at world 9 is x3.
    REQUIRE(LrSchedule(opts(0.1f, "linear", "constant"), 1).peak() == near(0.1));
    REQUIRE(LrSchedule(opts(0.1f, "sqrt", "constant"), 9).peak() == near(0.3));
}

TEST_CASE("constant schedule", "[optim][schedule]") {
    LrSchedule s(opts(0.01f, "linear", "constant"), 4);
    for (double e : {0.0, 0.5, 1.0, 7.25, 100.0}) {
        CAPTURE(e);
        REQUIRE(s.at(e) == near(0.04));
    }
}

TEST_CASE("step schedule multiplies by gamma at each boundary", "[optim][schedule]") {
    ScheduleOptions o = opts(0.1f, "none", "step");
    o.step_epochs = 3.0;
    o.gamma = 0.5;
    LrSchedule s(o, 2);
    REQUIRE(s.at(0.0) == near(0.1));
    REQUIRE(s.at(2.999) == near(0.1));
    REQUIRE(s.at(3.0) == near(0.05));  // exactly at the boundary: already decayed
    REQUIRE(s.at(4.5) == near(0.05));
    REQUIRE(s.at(5.99) == near(0.05));
    REQUIRE(s.at(6.0) == near(0.025));
    REQUIRE(s.at(9.5) == near(0.0125));

    ScheduleOptions d = opts(0.1f, "linear", "step");  // defaults: every 30 epochs x0.1; scaled peak 0.2
    LrSchedule s2(d, 2);
    REQUIRE(s2.at(29.9) == near(0.2));
    REQUIRE(s2.at(30.0) == near(0.02));
    REQUIRE(s2.at(60.0) == near(0.002));
}

TEST_CASE("cosine schedule", "[optim][schedule]") {
    ScheduleOptions o = opts(0.1f, "none", "cosine");
    o.total_epochs = 10.0;
    SECTION("to zero") {
        LrSchedule s(o, 1);
        REQUIRE(s.at(0.0) == near(0.1));
        // t = 0.25: 0.5 (1 + cos(pi/4)) = 0.5 (1 + 0.70710678) = 0.85355339
        REQUIRE(s.at(2.5) == near(0.085355339));
        REQUIRE(s.at(5.0) == near(0.05));  // middle: half the peak
        // t = 0.75: 0.5 (1 - 0.70710678) = 0.14644661
        REQUIRE(s.at(7.5) == near(0.014644661));
        REQUIRE(s.at(10.0) == Approx(0.0).margin(1e-9));
        REQUIRE(s.at(12.0) == Approx(0.0).margin(1e-9));  // stays at the floor past the horizon
    }
    SECTION("with min_lr_factor 0.1") {
        o.min_lr_factor = 0.1;
        LrSchedule s(o, 1);
        REQUIRE(s.at(0.0) == near(0.1));
        // middle: 0.1 + 0.9 * 0.5 = 0.55 of the peak
        REQUIRE(s.at(5.0) == near(0.055));
        // t = 0.25: 0.1 + 0.9 * 0.85355339 = 0.86819805
        REQUIRE(s.at(2.5) == near(0.086819805));
        REQUIRE(s.at(10.0) == near(0.01));
        REQUIRE(s.at(50.0) == near(0.01));
    }
    SECTION("decays from the scaled peak") {
        o.scaling = "linear";
        LrSchedule s(o, 4);
        o.scaling = "sqrt";
        LrSchedule q(o, 4);
        REQUIRE(s.at(0.0) == near(0.4));
        REQUIRE(s.at(5.0) == near(0.2));
        REQUIRE(q.at(5.0) == near(0.1));
    }
}

TEST_CASE("warmup ramps linearly from the unscaled lr to the scaled lr", "[optim][schedule]") {
    ScheduleOptions o = opts(0.1f, "linear", "constant");
    o.warmup_epochs = 2.0;
    SECTION("linear scaling, world 4: 0.1 -> 0.4") {
        LrSchedule s(o, 4);
        REQUIRE(s.peak() == near(0.4));
        REQUIRE(s.at(0.0) == near(0.1));
        REQUIRE(s.at(0.5) == near(0.175));  // 0.1 + 0.3 * 0.25
        REQUIRE(s.at(1.0) == near(0.25));   // half-way
        REQUIRE(s.at(1.5) == near(0.325));
        REQUIRE(s.at(2.0) == near(0.4));
        REQUIRE(s.at(3.0) == near(0.4));
    }
    SECTION("sqrt scaling, world 4: 0.1 -> 0.2") {
        o.scaling = "sqrt";
        LrSchedule s(o, 4);
        REQUIRE(s.at(0.0) == near(0.1));
        REQUIRE(s.at(1.0) == near(0.15));
        REQUIRE(s.at(2.0) == near(0.2));
    }
    SECTION("no scaling: warmup is flat") {
        o.scaling = "none";
        LrSchedule s(o, 4);
        REQUIRE(s.at(0.0) == near(0.1));
        REQUIRE(s.at(1.0) == near(0.1));
        REQUIRE(s.at(5.0) == near(0.1));
    }
    SECTION("warmup_start_lr overrides the starting point") {
        o.warmup_start_lr = 0.0;
        LrSchedule s(o, 4);
        REQUIRE(s.at(0.0) == Approx(0.0).margin(1e-9));
        REQUIRE(s.at(0.5) == near(0.1));
        REQUIRE(s.at(1.0) == near(0.2));
        REQUIRE(s.at(2.0) == near(0.4));
        o.warmup_start_lr = 0.02;
        LrSchedule s2(o, 4);
        REQUIRE(s2.at(0.0) == near(0.02));
        REQUIRE(s2.at(1.0) == near(0.21));  // 0.02 + 0.38 / 2
    }
}

TEST_CASE("cosine decay starts after warmup", "[optim][schedule]") {
    ScheduleOptions o = opts(0.1f, "linear", "cosine");
    o.warmup_epochs = 1.0;
    o.total_epochs = 11.0;
    LrSchedule s(o, 4);
    REQUIRE(s.at(0.0) == near(0.1));
    REQUIRE(s.at(0.5) == near(0.25));
    REQUIRE(s.at(1.0) == near(0.4));   // end of warmup: the peak, start of the cosine
    REQUIRE(s.at(6.0) == near(0.2));   // half-way through the 10 decay epochs
    REQUIRE(s.at(11.0) == Approx(0.0).margin(1e-9));
}

TEST_CASE("step decay counts epochs from 0, warmup or not", "[optim][schedule]") {
    ScheduleOptions o = opts(0.1f, "linear", "step");
    o.warmup_epochs = 1.0;
    o.step_epochs = 2.0;
    o.gamma = 0.1;
    LrSchedule s(o, 2);
    REQUIRE(s.at(0.5) == near(0.15));
    REQUIRE(s.at(1.5) == near(0.2));
    REQUIRE(s.at(2.0) == near(0.02));
}

TEST_CASE("unknown scaling or schedule is an InputError", "[optim][schedule]") {
    REQUIRE_THROWS_AS(LrSchedule(opts(0.1f, "quadratic", "constant"), 4), InputError);
    REQUIRE_THROWS_AS(LrSchedule(opts(0.1f, "Linear", "constant"), 4), InputError);
    REQUIRE_THROWS_AS(LrSchedule(opts(0.1f, "linear", "exponential"), 4), InputError);
    try {
        LrSchedule(opts(0.1f, "quadratic", "constant"), 4);
        FAIL("no InputError");
    } catch (const InputError& e) {
        REQUIRE_THAT(e.what(), Catch::Contains("quadratic"));
    }
}

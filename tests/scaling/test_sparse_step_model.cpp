// The sparse step model on hand-made inputs: every expected number is worked out by hand in the comments.
#include <catch2/catch.hpp>

#include "ringtrain/core/error.hpp"
#include "ringtrain/scaling/sparse_step_model.hpp"

using namespace ringtrain;
using namespace ringtrain::scaling;

namespace {

Link hand_link() {  // 10 us, 1 GB/s
    Link l;
    l.alpha_s = 10e-6;
    l.beta_s_per_byte = 1e-9;
    return l;
}

// input 1 + forward 2 + backward 3 + optimizer 1 = 7 ms; the slowest rank 10 % slower; 1000 rows merged at 50 ns.
// The exchange: a 100 KB-per-rank slot allgather on 3 steps in 4, a 1 MB dense allreduce on the fourth.
SparseStepInputs hand_inputs() {
    SparseStepInputs in;
    in.input_s = 1e-3;
    in.forward_s = 2e-3;
    in.backward_s = 3e-3;
    in.optimizer_s = 1e-3;
    in.straggler = 0.1;
    in.merge_rows = 1000;
    in.merge_s_per_row = 50e-9;
    in.exchange = {{"slot allgather", CollectiveKind::Allgather, 1e5, 0.75},
                   {"dense allreduce", CollectiveKind::Allreduce, 1e6, 0.25}};
    return in;
}

}  // namespace

TEST_CASE("collective_time: ring allreduce and allgather by the alpha-beta formulas", "[scaling][sparse]") {
    const Link l = hand_link();
    // Allreduce, N = 4, 1 MB: 2·3·10 us = 60 us; 2·3/4·1e6·1e-9 = 1.5 ms.
    CollectiveTime t = collective_time({"a", CollectiveKind::Allreduce, 1e6, 1}, 4, l);
    CHECK(t.latency_s == Approx(60e-6));
    CHECK(t.bandwidth_s == Approx(1.5e-3));
    // Allgather, N = 4, 100 KB from each rank: 3·10 us = 30 us; 3·1e5·1e-9 = 0.3 ms.
    t = collective_time({"g", CollectiveKind::Allgather, 1e5, 1}, 4, l);
    CHECK(t.latency_s == Approx(30e-6));
    CHECK(t.bandwidth_s == Approx(0.3e-3));
    CHECK(collective_time({"g", CollectiveKind::Allgather, 1e5, 1}, 1, l).total() == 0.0);
}

TEST_CASE("predict_sparse_step: the parts of a step one after the other", "[scaling][sparse]") {
    const SparseStepInputs in = hand_inputs();
    const SparsePrediction p = predict_sparse_step(in, hand_link(), 4, 100);
    // Opening allreduce of 32 bytes: 60 us + 2·3/4·32 ns = 0.048 us.
    CHECK(p.opening.latency_s == Approx(60e-6));
    CHECK(p.opening.bandwidth_s == Approx(48e-9));
    // Slot allgather ×0.75: 22.5 us + 225 us; dense allreduce ×0.25: 15 us + 375 us.
    REQUIRE(p.exchange.size() == 2);
    CHECK(p.exchange[0].latency_s == Approx(22.5e-6));
    CHECK(p.exchange[0].bandwidth_s == Approx(225e-6));
    CHECK(p.exchange[1].latency_s == Approx(15e-6));
    CHECK(p.exchange[1].bandwidth_s == Approx(375e-6));
    CHECK(p.terms.latency == Approx(97.5e-6));
    CHECK(p.terms.communication == Approx(600.048e-6));
    CHECK(p.terms.merge == Approx(50e-6));
    CHECK(p.terms.straggler == Approx(0.7e-3));  // 0.1 × 7 ms
    // 1.1 × 7 ms + 97.5 us + 600.048 us + 50 us.
    CHECK(p.step_s == Approx(8.447548e-3));
    CHECK(p.efficiency == Approx(7e-3 / 8.447548e-3));
    CHECK(p.samples_per_s == Approx(400 / 8.447548e-3));
    CHECK(p.dominant == "compute");  // forward + backward, 5 ms
    // The terms add up to the step.
    const SparseTerms& k = p.terms;
    CHECK(k.input + k.compute + k.optimizer + k.straggler + k.communication + k.latency + k.merge == Approx(p.step_s));
}

TEST_CASE("predict_sparse_step: a second gather (owner-computes updates) is one more entry", "[scaling][sparse]") {
    SparseStepInputs in = hand_inputs();
    const double before = predict_sparse_step(in, hand_link(), 4, 100).step_s;
    in.exchange.push_back({"updated rows allgather", CollectiveKind::Allgather, 5e4, 1});
    const SparsePrediction p = predict_sparse_step(in, hand_link(), 4, 100);
    // 3·10 us + 3·5e4·1 ns = 30 us + 150 us.
    CHECK(p.step_s - before == Approx(180e-6));
    CHECK(p.exchange.size() == 3);
}

TEST_CASE("predict_sparse_step: a measured exchange replaces the formulas; the link splits it", "[scaling][sparse]") {
    SparseStepInputs in = hand_inputs();
    in.measured_exchange_s = 2e-3;
    const SparsePrediction p = predict_sparse_step(in, hand_link(), 4, 100);
    // The formulas' 637.5 us scaled to 2 ms, each entry's latency kept (22.5 + 15 us).
    REQUIRE(p.exchange.size() == 2);
    CHECK(p.exchange[0].total() == Approx(2e-3 * 247.5 / 637.5));
    CHECK(p.exchange[1].total() == Approx(2e-3 * 390 / 637.5));
    CHECK(p.exchange[0].latency_s == Approx(22.5e-6));
    CHECK(p.terms.latency == Approx(97.5e-6));
    CHECK(p.terms.communication == Approx(48e-9 + 2e-3 - 37.5e-6));
    CHECK(p.step_s == Approx(7.7e-3 + 97.5e-6 + 48e-9 + 2e-3 - 37.5e-6 + 50e-6));
}

TEST_CASE("predict_sparse_step: one rank is its compute; bad inputs are errors", "[scaling][sparse]") {
    SparseStepInputs in = hand_inputs();
    const SparsePrediction one = predict_sparse_step(in, hand_link(), 1, 100);
    CHECK(one.step_s == Approx(7e-3));
    CHECK(one.efficiency == Approx(1.0));
    CHECK(one.terms.merge == 0.0);
    CHECK(one.terms.straggler == 0.0);
    in.exchange[0].per_step = 1.5;
    CHECK_THROWS_AS(predict_sparse_step(in, hand_link(), 4, 100), Error);
    in = hand_inputs();
    in.merge_rows = -1;
    CHECK_THROWS_AS(predict_sparse_step(in, hand_link(), 4, 100), Error);
    CHECK_THROWS_AS(predict_sparse_step(hand_inputs(), hand_link(), 0, 100), InputError);
}

TEST_CASE("fit_collectives_link: recovers the link from mixed collectives", "[scaling][sparse]") {
    const Link l = hand_link();
    const SparseStepInputs in = hand_inputs();
    // A one-float allreduce probe (60 us + 6 ns) and the step's whole exchange (637.5 us), at N = 4.
    const Collective probe{"probe", CollectiveKind::Allreduce, 4, 1};
    const std::vector<TimedCollectives> samples = {{{probe}, collective_time(probe, 4, l).total()},
                                                   {in.exchange, 637.5e-6}};
    const Link fit = fit_collectives_link(samples, 4, "hand");
    CHECK(fit.alpha_s == Approx(10e-6));
    CHECK(fit.beta_s_per_byte == Approx(1e-9));
    CHECK(fit.source == "hand");
    // One sample cannot tell latency from bandwidth; one rank has no link.
    CHECK_THROWS_AS(fit_collectives_link(std::span(samples).first(1), 4, ""), Error);
    CHECK_THROWS_AS(fit_collectives_link(samples, 1, ""), Error);
    // A line that would need a negative latency: 1 KB in 1 us, 100 KB in 300 us (N = 2: t = α + n·β) -> α = 0 and
    // β the best fit through the origin.
    const std::vector<TimedCollectives> steep = {{{{"g", CollectiveKind::Allgather, 1e3, 1}}, 1e-6},
                                                 {{{"g", CollectiveKind::Allgather, 1e5, 1}}, 300e-6}};
    const Link clamped = fit_collectives_link(steep, 2, "");
    CHECK(clamped.alpha_s == 0.0);
    // Weights 1/t²: β = Σ w·n·t / Σ w·n² = (1e3/1e-6 + 1e5/3e-4) / (1e6/1e-12 + 1e10/9e-8).
    CHECK(clamped.beta_s_per_byte == Approx((1e9 + 1e5 / 3e-4) / (1e18 + 1e10 / 9e-8)));
}

// ScalingModel on hand-made inputs: every expected number below is worked out by hand in the comments.
#include <catch2/catch.hpp>

#include "ringtrain/core/error.hpp"
#include "ringtrain/scaling/link.hpp"
#include "ringtrain/predict/predictor.hpp"
#include "ringtrain/scaling/scaling_model.hpp"

#include "hand_inputs.hpp"

using namespace ringtrain;
using namespace ringtrain::predict;
using namespace ringtrain::scaling;

using namespace rt_predict_test;

TEST_CASE("allreduce_time: ring, recursive doubling and halving-doubling by the alpha-beta formulas", "[predict]") {
    const Link l = hand_link();
    // Ring, N=4, 1 MB: 2·3·10 us = 60 us; 2·3/4·1e6·1e-9 = 1.5 ms.
    auto r = allreduce_time(Algorithm::Ring, 4, 1e6, l);
    CHECK(r.latency_s == Approx(60e-6));
    CHECK(r.bandwidth_s == Approx(1.5e-3));
    // Recursive doubling, N=4: 2 rounds: 20 us + 2·1 ms.
    r = allreduce_time(Algorithm::RecursiveDoubling, 4, 1e6, l);
    CHECK(r.latency_s == Approx(20e-6));
    CHECK(r.bandwidth_s == Approx(2e-3));
    // Halving-doubling, N=4: 2·2·10 us = 40 us; 1.5 ms.
    r = allreduce_time(Algorithm::HalvingDoubling, 4, 1e6, l);
    CHECK(r.latency_s == Approx(40e-6));
    CHECK(r.bandwidth_s == Approx(1.5e-3));
    // N=3 and N=6 are not powers of two: the extra ranks fold in and get the result back, floor(log2 N) + 2 rounds
    // (3 and 4), as RingCommunicator::recursive_doubling runs them.
    CHECK(allreduce_time(Algorithm::RecursiveDoubling, 3, 1e6, l).latency_s == Approx(30e-6));
    CHECK(allreduce_time(Algorithm::RecursiveDoubling, 6, 1e6, l).latency_s == Approx(40e-6));
    CHECK(allreduce_time(Algorithm::RecursiveDoubling, 6, 1e6, l).bandwidth_s == Approx(4e-3));
    // One rank: nothing to send.
    CHECK(allreduce_time(Algorithm::Ring, 1, 1e6, l).total() == 0.0);
}

TEST_CASE("auto: the ring backend's algorithm per message size, by its float32 size", "[predict]") {
    // RingCommunicator's defaults: recursive doubling below 128 KiB; halving-doubling below 4 MiB at a power of two
    // from 4 ranks; the ring otherwise.
    CHECK(ring_backend_choice(8, 131071) == Algorithm::RecursiveDoubling);
    CHECK(ring_backend_choice(8, 131072) == Algorithm::HalvingDoubling);
    CHECK(ring_backend_choice(8, 4194303) == Algorithm::HalvingDoubling);
    CHECK(ring_backend_choice(8, 4194304) == Algorithm::Ring);
    CHECK(ring_backend_choice(6, 1e6) == Algorithm::Ring);  // not a power of two
    CHECK(ring_backend_choice(2, 1e6) == Algorithm::Ring);  // below 4 ranks
    CHECK(ring_backend_choice(512, 31360) == Algorithm::RecursiveDoubling);  // logreg's one 31 KB bucket
    const Link l = hand_link();
    // 100 KB at 8 ranks: recursive doubling, 3 rounds of (10 us + 100 us).
    CHECK(allreduce_time(Algorithm::Auto, 8, 1e5, l).total() == Approx(3 * (10e-6 + 1e-4)));
    // 100 KB on a 16-bit wire of a 200 KB float32 message: halving-doubling, as the float32 size decides.
    const CollectiveTime c = allreduce_time(Algorithm::Auto, 8, 1e5, l, 2e5);
    CHECK(c.latency_s == Approx(2 * 3 * 10e-6));
    CHECK(c.bandwidth_s == Approx(2.0 * 7 / 8 * 1e5 * 1e-9));
}

TEST_CASE("fit_link: alpha and beta back from the algorithm's own times", "[predict]") {
    const Link truth = hand_link();  // 10 us, 1 ns/byte
    for (const Algorithm a : {Algorithm::Ring, Algorithm::Auto}) {
        for (const int ranks : {2, 8}) {
            std::vector<LinkSample> samples;
            for (double bytes = 4096; bytes <= 16.0 * 1048576; bytes *= 4)  // both sides of every threshold
                samples.push_back({bytes, allreduce_time(a, ranks, bytes, truth).total(), bytes});
            const Link f = fit_link(samples, ranks, a, "test");
            INFO(to_string(a) << " at " << ranks);
            CHECK(f.alpha_s == Approx(truth.alpha_s).epsilon(1e-6));
            CHECK(f.beta_s_per_byte == Approx(truth.beta_s_per_byte).epsilon(1e-6));
            CHECK(f.source == "test");
        }
    }
    // Auto's small sizes take one round at 2 ranks (α + nβ), the large ones the ring (2α + nβ): fitted through the
    // ring formula alone, the same times give another α.
    std::vector<LinkSample> mixed;
    for (double bytes = 4096; bytes <= 16.0 * 1048576; bytes *= 4)
        mixed.push_back({bytes, allreduce_time(Algorithm::Auto, 2, bytes, truth).total()});
    CHECK(fit_link(mixed, 2, Algorithm::Ring, "").alpha_s != Approx(truth.alpha_s).epsilon(0.05));
    // Pure bandwidth: α would come out negative and is kept at 0.
    const LinkSample bw[] = {{1000, 1e-6}, {2000, 2e-6}};
    const Link z = fit_link(bw, 2, Algorithm::Ring, "");
    CHECK(z.alpha_s == Approx(0.0).margin(1e-15));  // kept at 0 when rounding makes it negative
    CHECK(z.beta_s_per_byte == Approx(1e-9));
    const LinkSample one_size[] = {{1000, 1e-6}, {1000, 2e-6}};
    CHECK_THROWS_AS(fit_link(one_size, 2, Algorithm::Ring, ""), Error);
    CHECK_THROWS_AS(fit_link(bw, 1, Algorithm::Ring, ""), Error);
}

TEST_CASE("predict_step: buckets overlap backward; the step ends after the last bucket and the optimizer", "[predict]") {
    const StepTimings t = hand_timings(250000);  // bucket 0: 1 MB, bucket 1: 1 MB
    const auto layout = two_buckets(t);
    Setting s;  // ring, fp32, overlap
    const Prediction one = predict_step(t, layout, hand_link(), s, 1, 64);
    CHECK(one.step_s == Approx(16e-3));
    CHECK(one.efficiency == Approx(1.0));
    CHECK(one.samples_per_s == Approx(64 / 16e-3));

    // N=4: each bucket 1.56 ms. Backward begins at 5 ms. Bucket 0 ready at 7 ms -> ends 8.56 ms. Bucket 1 ready
    // at 15 ms (p0, the last) -> ends 16.56 ms. Backward ends at 15 ms, so 1.56 ms is exposed; + optimizer 1 ms.
    const Prediction p = predict_step(t, layout, hand_link(), s, 4, 64);
    REQUIRE(p.bucket_end_s.size() == 2);
    CHECK(p.bucket_end_s[0] == Approx(8.56e-3));
    CHECK(p.bucket_end_s[1] == Approx(16.56e-3));
    CHECK(p.step_s == Approx(17.56e-3));
    CHECK(p.efficiency == Approx(16.0 / 17.56));
    CHECK(p.samples_per_s == Approx(4 * 64 / 17.56e-3));
    // The exposed 1.56 ms: latency 120/3120 of it (0.06 ms), bandwidth the rest.
    CHECK(p.terms.latency == Approx(0.06e-3));
    CHECK(p.terms.communication == Approx(1.5e-3));
    CHECK(p.terms.input + p.terms.compute + p.terms.optimizer + p.terms.straggler + p.terms.communication +
              p.terms.latency == Approx(p.step_s));
    CHECK(p.dominant == "compute");
}

TEST_CASE("predict_step: a bucket waits for the previous bucket's allreduce", "[predict]") {
    // Bucket 0 = 20 MB: 2·3/4·2e7·1e-9 = 30 ms + 60 us. Ready at 7 ms -> ends 37.06 ms. Bucket 1 is ready at 15 ms
    // but starts only at 37.06 -> ends 38.62 ms. Step 38.62 + 1 = 39.62 ms; exposed 23.62 ms.
    const StepTimings t = hand_timings(5000000);
    const Prediction p = predict_step(t, two_buckets(t), hand_link(), Setting{}, 4, 64);
    CHECK(p.bucket_end_s[0] == Approx(37.06e-3));
    CHECK(p.bucket_end_s[1] == Approx(38.62e-3));
    CHECK(p.step_s == Approx(39.62e-3));
    CHECK(p.dominant == "communication");
    CHECK(p.terms.communication + p.terms.latency == Approx(23.62e-3));
}

TEST_CASE("predict_step: measured bucket times replace the formula; the link only splits off the latency", "[predict]") {
    // As above at N = 4, but bucket 0 measured at 5 ms and bucket 1 at 0.1 ms: bucket 0 ready at 7 ms -> ends 12 ms;
    // bucket 1 ready at 15 ms -> ends 15.1 ms; + 1 ms. Exposed 0.1 ms, of it the formula's latency 6·10 us = 0.06 ms.
    const StepTimings t = hand_timings(250000);
    const double measured[] = {5e-3, 0.1e-3};
    const Prediction p = predict_step(t, two_buckets(t), hand_link(), Setting{}, 4, 64, measured);
    CHECK(p.bucket_end_s[0] == Approx(12e-3));
    CHECK(p.bucket_end_s[1] == Approx(15.1e-3));
    CHECK(p.step_s == Approx(16.1e-3));
    // Latency: 60 us of each bucket, 0.12 of the buckets' 5.1 ms, that share of the exposed 0.1 ms.
    CHECK(p.terms.latency == Approx(0.1e-3 * 0.12 / 5.1).epsilon(1e-6));
    CHECK(p.terms.communication + p.terms.latency == Approx(0.1e-3));
    const double wrong_count[] = {5e-3};
    CHECK_THROWS_AS(predict_step(t, two_buckets(t), hand_link(), Setting{}, 4, 64, wrong_count), Error);
}

TEST_CASE("predict_step: no overlap, 16-bit wire, straggler, local SGD", "[predict]") {
    const StepTimings t = hand_timings(250000);
    const auto layout = two_buckets(t);
    Setting s;
    s.overlap = false;  // both buckets after backward: 15 + 2·1.56 + 1 = 19.12 ms
    CHECK(predict_step(t, layout, hand_link(), s, 4, 64).step_s == Approx(19.12e-3));

    s = Setting{};
    s.wire_bytes_per_float = 2;  // half the bytes: bucket 1 takes 0.06 + 0.75 ms: 15 + 0.81 + 1 = 16.81 ms
    CHECK(predict_step(t, layout, hand_link(), s, 4, 64).step_s == Approx(16.81e-3));

    s = Setting{};
    s.straggler = 0.1;  // all compute 1.1x: backward 5.5..16.5 ms; bucket 1 ends 18.06; + 1.1 = 19.16 ms
    const Prediction p = predict_step(t, layout, hand_link(), s, 4, 64);
    CHECK(p.step_s == Approx(19.16e-3));
    CHECK(p.terms.straggler == Approx(1.6e-3));
    CHECK(p.efficiency == Approx(16.0 / 19.16));

    s = Setting{};
    s.local_sgd_period = 4;  // 16 ms of compute, then 2·1.56 ms of blocking averages every 4th step: 16.78 ms
    CHECK(predict_step(t, layout, hand_link(), s, 4, 64).step_s == Approx(16.78e-3));
}

TEST_CASE("predict_step: contention slows backward and the allreduce while they overlap", "[predict]") {
    const StepTimings t = hand_timings(250000);  // buckets of 1.56 ms at N = 4
    const auto layout = two_buckets(t);
    Setting s;
    s.contention = {2.0, 1.5};  // backward 2x slower beside an allreduce, the allreduce 1.5x beside backward
    // Backward begins at 5 ms. Bucket 0 ready at 7 ms (2 ms of backward done); beside backward it takes
    // 1.56·1.5 = 2.34 ms -> ends 9.34 ms, while backward does 2.34/2 = 1.17 ms of work (3.17 done). The other
    // 6.83 ms of backward run alone: backward ends 16.17 ms (1.17 ms late), bucket 1 then alone -> 17.73 ms; + 1 ms.
    Prediction p = predict_step(t, layout, hand_link(), s, 4, 64);
    CHECK(p.bucket_end_s[0] == Approx(9.34e-3));
    CHECK(p.bucket_end_s[1] == Approx(17.73e-3));
    CHECK(p.step_s == Approx(18.73e-3));
    CHECK(p.terms.contention == Approx(1.17e-3));
    CHECK(p.terms.communication + p.terms.latency == Approx(1.56e-3));
    CHECK(p.terms.input + p.terms.compute + p.terms.optimizer + p.terms.straggler + p.terms.communication +
              p.terms.latency + p.terms.contention == Approx(p.step_s));

    // Backward ends first: bucket 0 = 20 MB (30.06 ms alone) from 7 ms. The 8 ms of backward left take 16 ms
    // beside it -> backward ends 23 ms (8 ms late), having done 16/1.5 = 10.667 ms of the allreduce; its 19.393 ms
    // left run alone -> 42.393 ms; bucket 1 -> 43.953 ms; step 44.953 ms.
    const StepTimings big = hand_timings(5000000);
    p = predict_step(big, two_buckets(big), hand_link(), s, 4, 64);
    CHECK(p.bucket_end_s[0] == Approx(42.3933e-3));
    CHECK(p.bucket_end_s[1] == Approx(43.9533e-3));
    CHECK(p.step_s == Approx(44.9533e-3));
    CHECK(p.terms.contention == Approx(8e-3));
    CHECK(p.terms.communication + p.terms.latency == Approx(20.9533e-3));

    // Nothing beside backward without overlap or under local SGD: the steps of the case above.
    s.overlap = false;
    CHECK(predict_step(t, layout, hand_link(), s, 4, 64).step_s == Approx(19.12e-3));
    s.overlap = true;
    s.local_sgd_period = 4;
    CHECK(predict_step(t, layout, hand_link(), s, 4, 64).step_s == Approx(16.78e-3));
    // One rank has no allreduce to contend with.
    s.local_sgd_period = 0;
    CHECK(predict_step(t, layout, hand_link(), s, 1, 64).step_s == Approx(16e-3));

    // With a straggler (s = 1.1) and measured bucket times (1 ms, 2 ms): backward 5.5 .. 16.5 ms alone, 11 ms of
    // work. Bucket 0 ready at 2.2 ms of work (7.7 ms): 1.5 ms beside backward -> 9.2 ms, backward then 2.95 done.
    // The rest (8.05 ms) alone -> backward ends 17.25 ms (0.75 ms late); bucket 1 (2 ms) -> 19.25; + 1.1 -> 20.35.
    s = Setting{};
    s.straggler = 0.1;
    s.contention = {2.0, 1.5};
    const double measured[] = {1e-3, 2e-3};
    p = predict_step(t, layout, hand_link(), s, 4, 64, measured);
    CHECK(p.bucket_end_s[0] == Approx(9.2e-3));
    CHECK(p.step_s == Approx(20.35e-3));
    CHECK(p.terms.contention == Approx(0.75e-3));
    CHECK(p.terms.input + p.terms.compute + p.terms.optimizer + p.terms.straggler + p.terms.communication +
              p.terms.latency + p.terms.contention == Approx(p.step_s));
}

TEST_CASE("predict_step: a gradient reported after backward's end; a backward of no time", "[predict]") {
    // p0 reported at 12 ms, past backward's 10 ms (medians of different steps): bucket 1 waits until 5 + 12 = 17 ms
    // -> 18.56 ms; step 19.56 ms. With contention backward ends 1.17 ms late (bucket 0 beside it, as above) and the
    // bucket still waits the 2 ms past that end: 16.17 + 2 = 18.17 -> 19.73 ms; step 20.73 ms.
    StepTimings t = hand_timings(250000);
    t.ready_s = {12e-3, 6e-3, 2e-3};
    const auto layout = two_buckets(t);
    Setting s;
    Prediction p = predict_step(t, layout, hand_link(), s, 4, 64);
    CHECK(p.bucket_end_s[1] == Approx(18.56e-3));
    CHECK(p.step_s == Approx(19.56e-3));
    s.contention = {2.0, 1.5};
    p = predict_step(t, layout, hand_link(), s, 4, 64);
    CHECK(p.bucket_end_s[1] == Approx(19.73e-3));
    CHECK(p.step_s == Approx(20.73e-3));
    // No backward at all: nothing to contend with; both buckets after the forward (5 ms): 5 + 2·1.56 + 1 = 9.12 ms,
    // and the terms still add up (no contention term).
    t.backward_s = 0;
    t.ready_s = {0, 0, 0};
    p = predict_step(t, layout, hand_link(), s, 4, 64);
    CHECK(p.step_s == Approx(9.12e-3));
    CHECK(p.terms.contention == 0);
    CHECK(p.terms.input + p.terms.compute + p.terms.optimizer + p.terms.communication + p.terms.latency ==
          Approx(p.step_s));
}

TEST_CASE("predict_rows: the best setting is the fastest algorithm and wire format", "[predict]") {
    const StepTimings t = hand_timings(5000000);
    Setting s;
    const auto rows = predict_rows(t, two_buckets(t), hand_link(), s, {4}, 64);
    REQUIRE(rows.size() == 1);
    // Bandwidth-bound: a 16-bit wire beats the configured fp32 one (the only setting varied: the algorithm is the
    // backend's choice, which no key selects).
    CHECK(rows[0].best.setting.wire_bytes_per_float == 2.0);
    CHECK(rows[0].best.step_s < rows[0].configured.step_s);
    // Configured with 16 bits already, the best is what is configured (fp32 is slower).
    Setting half = s;
    half.wire_bytes_per_float = 2;
    const auto halved = predict_rows(t, two_buckets(t), hand_link(), half, {4}, 64);
    CHECK(halved[0].best.step_s == halved[0].configured.step_s);

    // Local SGD: its averages travel in float32 (train refuses sync.compression with it), so the best setting
    // offered keeps the fp32 wire, even where 16 bits would be faster.
    s.local_sgd_period = 5;
    const auto local = predict_rows(t, two_buckets(t), hand_link(), s, {4}, 64);
    REQUIRE(local.size() == 1);
    CHECK(local[0].best.setting.wire_bytes_per_float == 4.0);
    CHECK(local[0].best.setting.local_sgd_period == 5);
}

TEST_CASE("parse_link, fit_line, parse_ranks and parse_algorithm", "[predict]") {
    Link l = parse_link("10gbit,5us");
    CHECK(l.alpha_s == Approx(5e-6));
    CHECK(l.beta_s_per_byte == Approx(8e-10));
    l = parse_link("100mbit");  // latency defaults to 5 us
    CHECK(l.alpha_s == Approx(5e-6));
    CHECK(l.beta_s_per_byte == Approx(8e-8));
    CHECK(parse_link("1GBit,2ms").alpha_s == Approx(2e-3));
    CHECK_THROWS_AS(parse_link("10gbps"), InputError);
    CHECK_THROWS_AS(parse_link("fast"), InputError);
    CHECK_THROWS_AS(parse_link("10gbit,5ns"), InputError);
    // A latency of 0 (what --measure over shared memory can fit) is a link; a rate of 0 or a negative latency is not.
    CHECK(parse_link("72.3gbit,0us").alpha_s == 0.0);
    CHECK_THROWS_AS(parse_link("0gbit,5us"), InputError);
    CHECK_THROWS_AS(parse_link("10gbit,-1us"), InputError);

    const double x[] = {1000, 2000, 4000}, y[] = {3e-6 + 1000e-9, 3e-6 + 2000e-9, 3e-6 + 4000e-9};
    const LineFit f = fit_line(x, y);
    CHECK(f.intercept == Approx(3e-6));
    CHECK(f.slope == Approx(1e-9));
    // Weighted: an outlier at the large size barely moves the intercept when small sizes weigh more.
    const double yo[] = {3e-6 + 1000e-9, 3e-6 + 2000e-9, 2 * (3e-6 + 4000e-9)};
    const double heavy[] = {1e6, 1e6, 1};
    CHECK(fit_line(x, yo, heavy).intercept == Approx(3e-6).epsilon(1e-3));
    CHECK(fit_line(x, yo).intercept < 0);  // unweighted, the outlier drags it below zero
    const double same[] = {5, 5};
    CHECK_THROWS_AS(fit_line(same, std::span<const double>(y, 2)), Error);

    CHECK(parse_ranks("2,3,8") == std::vector<int>{2, 3, 8});
    CHECK(parse_ranks("").size() == 9);  // 2 .. 512
    CHECK_THROWS_AS(parse_ranks("2,x"), InputError);
    CHECK_THROWS_AS(parse_ranks("0"), InputError);
    CHECK(parse_algorithm("halving_doubling") == Algorithm::HalvingDoubling);
    CHECK(parse_algorithm("auto") == Algorithm::Auto);
    train::SyncPlan sync;
    sync.backend = train::Backend::Ring;
    CHECK(algorithm_for(sync) == Algorithm::Auto);
    sync.backend = train::Backend::Mpi;
    CHECK(algorithm_for(sync) == Algorithm::Ring);
    CHECK_THROWS_AS(parse_algorithm("tree"), InputError);
}

TEST_CASE("timings_from: accumulation passes put the earlier backward passes before the last one", "[predict]") {
    train::StepProfile prof;
    prof.input_s = 1e-3;
    prof.forward_s = 4e-3;
    prof.backward_s = 10e-3;
    prof.optimizer_s = 1e-3;
    prof.gradients = {{"w", 100, 9e-3}, {"b", 10, 8e-3}};
    const StepTimings one = timings_from(prof);
    CHECK(one.compute_s() == Approx(16e-3));
    // Three passes: input 3 ms, forward 3·4 + 2·10 = 32 ms, then the last backward 10 ms, optimizer 1 ms.
    const StepTimings three = timings_from(prof, 3);
    CHECK(three.input_s == Approx(3e-3));
    CHECK(three.forward_s == Approx(32e-3));
    CHECK(three.backward_s == Approx(10e-3));
    CHECK(three.compute_s() == Approx(46e-3));
    CHECK(three.ready_s == std::vector<double>{9e-3, 8e-3});
    CHECK(three.grad_floats == std::vector<size_t>{100, 10});
}

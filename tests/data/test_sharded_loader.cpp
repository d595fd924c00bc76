#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/sharded_loader.hpp"
#include "ringtrain/data/synthetic.hpp"

using namespace ringtrain;
using namespace ringtrain::data;
using Catch::Contains;

namespace {

// Sample i is {i, i + 0.5}, label i % 7; optionally throws at one index or sleeps per read.
class IndexDataset : public Dataset {
public:
    explicit IndexDataset(int64_t n) : n_(n) {}
    int64_t size() const override { return n_; }
    Shape sample_shape() const override { return {2}; }
    int64_t num_classes() const override { return 7; }
    float read(int64_t index, float* x) const override {
        if (index == throw_at) throw std::runtime_error("bad sample " + std::to_string(index));
        if (sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
        reads++;
        x[0] = float(index);
        x[1] = float(index) + 0.5f;
        return float(index % 7);
    }
    std::string description() const override { return "index dataset"; }

    int64_t throw_at = -1;
    int sleep_us = 0;
    mutable std::atomic<int64_t> reads{0};

private:
    int64_t n_;
};

LoaderOptions opts(int64_t batch, int rank, int world, uint64_t seed = 1, LoaderMode mode = LoaderMode::Train,
                   bool prefetch = true) {
    LoaderOptions o;
    o.batch_size = batch;
    o.rank = rank;
    o.world = world;
    o.seed = seed;
    o.mode = mode;
    o.prefetch = prefetch;
    return o;
}

using Batches = std::vector<std::vector<int64_t>>;  // sample indices of each batch

// Reads the rest of the current epoch, checking each batch's shape, second feature and labels.
Batches drain(ShardedLoader& loader) {
    Batches out;
    Batch b;
    while (loader.next(b)) {
        REQUIRE(b.x.ndim() == 2);
        REQUIRE(b.x.dim(1) == 2);
        REQUIRE(b.y.shape() == Shape{b.size()});
        std::vector<int64_t> idx;
        for (int64_t i = 0; i < b.size(); ++i) {
            const float v = b.x.data()[2 * i];
            REQUIRE(b.x.data()[2 * i + 1] == v + 0.5f);
            REQUIRE(b.y.data()[i] == float(int64_t(v) % 7));
            idx.push_back(int64_t(v));
        }
        out.push_back(idx);
    }
    return out;
}

Batches epoch(const Dataset& ds, LoaderOptions o, int64_t e, int64_t first_step = 0) {
    ShardedLoader l(ds, o);
    l.start_epoch(e, first_step);
    return drain(l);
}

std::vector<int64_t> flat(const Batches& bs) {
    std::vector<int64_t> v;
    for (const auto& b : bs) v.insert(v.end(), b.begin(), b.end());
    return v;
}

}  // namespace

TEST_CASE("train mode: each epoch is a permutation minus the dropped tail", "[data][loader]") {
    IndexDataset ds(100);
    for (bool prefetch : {true, false}) {
        CAPTURE(prefetch);
        // world 1, batch 8: 12 steps, 96 distinct samples, 4 dropped.
        {
            ShardedLoader l(ds, opts(8, 0, 1, 5, LoaderMode::Train, prefetch));
            REQUIRE(l.steps_per_epoch() == 12);
            REQUIRE(l.samples_per_epoch() == 96);
            for (int64_t e = 0; e < 3; ++e) {
                l.start_epoch(e);
                Batches bs = drain(l);
                REQUIRE(bs.size() == 12);
                for (auto& b : bs) REQUIRE(b.size() == 8);
                auto v = flat(bs);
                std::set<int64_t> s(v.begin(), v.end());
                REQUIRE(s.size() == 96);
                REQUIRE(*s.begin() >= 0);
                REQUIRE(*s.rbegin() < 100);
            }
        }
        // world 3, batch 4: 8 steps on every rank, 96 distinct samples across ranks.
        std::vector<int64_t> all;
        for (int r = 0; r < 3; ++r) {
            ShardedLoader l(ds, opts(4, r, 3, 5, LoaderMode::Train, prefetch));
            REQUIRE(l.steps_per_epoch() == 8);
            auto v = flat(epoch(ds, opts(4, r, 3, 5, LoaderMode::Train, prefetch), 2));
            REQUIRE(v.size() == 32);
            all.insert(all.end(), v.begin(), v.end());
        }
        REQUIRE(std::set<int64_t>(all.begin(), all.end()).size() == 96);
    }
}

TEST_CASE("train mode: order depends on seed and epoch only", "[data][loader]") {
    IndexDataset ds(64);
    const auto o = opts(8, 0, 1, 7);
    REQUIRE(epoch(ds, o, 0) == epoch(ds, o, 0));
    REQUIRE(epoch(ds, o, 3) == epoch(ds, o, 3));
    REQUIRE(epoch(ds, o, 0) != epoch(ds, o, 1));
    REQUIRE(epoch(ds, o, 0) != epoch(ds, opts(8, 0, 1, 8), 0));
    auto v = flat(epoch(ds, o, 0));
    REQUIRE(!std::is_sorted(v.begin(), v.end()));
    // Restarting an epoch on the same loader replays it.
    ShardedLoader l(ds, o);
    l.start_epoch(1);
    auto first = drain(l);
    l.start_epoch(0);
    drain(l);
    l.start_epoch(1);
    REQUIRE(drain(l) == first);
}

TEST_CASE("train mode: N ranks x batch B see what 1 rank x batch N*B sees", "[data][loader]") {
    IndexDataset ds(101);
    const int world = 3;
    const int64_t B = 5;
    for (int64_t e : {0, 1, 4}) {
        CAPTURE(e);
        Batches one = epoch(ds, opts(world * B, 0, 1, 11), e);
        REQUIRE(one.size() == 101 / 15);
        for (int r = 0; r < world; ++r) {
            CAPTURE(r);
            Batches mine = epoch(ds, opts(B, r, world, 11), e);
            REQUIRE(mine.size() == one.size());
            for (size_t s = 0; s < one.size(); ++s)
                REQUIRE(mine[s] == std::vector<int64_t>(one[s].begin() + r * B, one[s].begin() + (r + 1) * B));
        }
    }
}

TEST_CASE("a split moves a step's samples between ranks and keeps the global batch", "[data][loader]") {
    // sync.balance: ranks read uneven shares of each step's global window; concatenated in rank order they are still
    // the step 1 rank x batch N*B reads, from the split's first step on, and into the next epoch.
    IndexDataset ds(203);
    const int world = 3;
    const int64_t B = 6;
    const std::vector<int64_t> first_split{2, 9, 7}, second_split{10, 1, 7};
    for (bool prefetch : {true, false}) {
        CAPTURE(prefetch);
        const Batches one_e0 = epoch(ds, opts(world * B, 0, 1, 3), 0);
        const Batches one_e1 = epoch(ds, opts(world * B, 0, 1, 3), 1);
        REQUIRE(one_e0.size() == 11);
        std::vector<Batches> e0(world), e1(world);
        for (int r = 0; r < world; ++r) {
            ShardedLoader l(ds, opts(B, r, world, 3, LoaderMode::Train, prefetch));
            l.start_epoch(0);
            Batch b;
            // Steps 0-1 even; at step 1 (step() == 2) a split from step 3, so step 2 stays even (it may be
            // prefetched already); at step 5 another from step 7; one set past the epoch's end holds in the next.
            for (int64_t s = 0; l.next(b); ++s) {
                std::vector<int64_t> idx;
                for (int64_t i = 0; i < b.size(); ++i) idx.push_back(int64_t(b.x.data()[2 * i]));
                e0[r].push_back(idx);
                if (s == 1) l.set_split(l.step() + 1, first_split);
                if (s == 5) l.set_split(l.step() + 1, second_split);
                if (s == 10) l.set_split(l.step() + 1, first_split);
            }
            l.start_epoch(1);
            e1[r] = drain(l);
        }
        auto expected_share = [&](int64_t step, int r, const std::vector<int64_t>* split) {
            const std::vector<int64_t> even(world, B);
            const auto& c = split ? *split : even;
            int64_t before = 0;
            for (int q = 0; q < r; ++q) before += c[q];
            return std::make_pair(before, c[r]);
        };
        for (int64_t s = 0; s < 11; ++s) {
            CAPTURE(s);
            const std::vector<int64_t>* split = s < 3 ? nullptr : s < 7 ? &first_split : &second_split;
            std::vector<int64_t> joined;
            for (int r = 0; r < world; ++r) {
                const auto [first, count] = expected_share(s, r, split);
                REQUIRE(int64_t(e0[r][s].size()) == count);
                REQUIRE(e0[r][s] == std::vector<int64_t>(one_e0[s].begin() + first, one_e0[s].begin() + first + count));
                joined.insert(joined.end(), e0[r][s].begin(), e0[r][s].end());
            }
            REQUIRE(joined == one_e0[s]);
        }
        for (int64_t s = 0; s < 11; ++s) {
            CAPTURE(s);
            std::vector<int64_t> joined;
            for (int r = 0; r < world; ++r) {
                REQUIRE(int64_t(e1[r][s].size()) == first_split[r]);
                joined.insert(joined.end(), e1[r][s].begin(), e1[r][s].end());
            }
            REQUIRE(joined == one_e1[s]);
        }
    }
}

TEST_CASE("a split that does not add up, or starts at a step already read, is refused", "[data][loader]") {
    IndexDataset ds(100);
    ShardedLoader l(ds, opts(4, 0, 2, 1));
    Batch b;
    REQUIRE(l.next(b));
    REQUIRE_THROWS_WITH(l.set_split(5, {4, 5}), Contains("sum to 9, the global batch is 8"));
    REQUIRE_THROWS_WITH(l.set_split(5, {8, 0}), Contains("at least one sample"));
    REQUIRE_THROWS_WITH(l.set_split(5, {8}), Contains("1 counts for 2 ranks"));
    REQUIRE_THROWS_WITH(l.set_split(1, {5, 3}), Contains("may already be read"));
    REQUIRE_NOTHROW(l.set_split(2, {5, 3}));
    ShardedLoader ev(ds, opts(4, 0, 2, 1, LoaderMode::Eval));
    REQUIRE_THROWS_WITH(ev.set_split(2, {5, 3}), Contains("only a training loader"));
}

TEST_CASE("eval mode covers every sample exactly once across ranks", "[data][loader]") {
    struct Case {
        int64_t n, b;
        int world;
    };
    for (auto c : {Case{10, 4, 3}, Case{10, 4, 1}, Case{10, 3, 4}, Case{7, 2, 5}, Case{3, 4, 5}, Case{100, 7, 6}}) {
        CAPTURE(c.n, c.b, c.world);
        IndexDataset ds(c.n);
        std::vector<int64_t> all;
        int64_t prev_end = 0;
        for (int r = 0; r < c.world; ++r) {
            for (bool prefetch : {true, false}) {
                ShardedLoader l(ds, opts(c.b, r, c.world, 1, LoaderMode::Eval, prefetch));
                Batches bs = drain(l);  // next() without start_epoch begins epoch 0
                REQUIRE(int64_t(bs.size()) == l.steps_per_epoch());
                for (size_t s = 0; s + 1 < bs.size(); ++s) REQUIRE(int64_t(bs[s].size()) == c.b);
                auto v = flat(bs);
                REQUIRE(int64_t(v.size()) == l.samples_per_epoch());
                // Contiguous, unshuffled, right after the previous rank's share.
                for (size_t i = 0; i < v.size(); ++i) REQUIRE(v[i] == prev_end + int64_t(i));
                // Shares differ by at most one sample.
                REQUIRE(std::abs(int64_t(v.size()) - c.n / c.world) <= 1);
                if (!prefetch) {
                    all.insert(all.end(), v.begin(), v.end());
                    prev_end += int64_t(v.size());
                }
            }
        }
        std::vector<int64_t> want(c.n);
        for (int64_t i = 0; i < c.n; ++i) want[i] = i;
        REQUIRE(all == want);
    }
    // The awkward case from the spec, spelled out: shares 3, 3, 4; rank 2 has batches of 4; a short one at world 1.
    IndexDataset ds(10);
    REQUIRE(epoch(ds, opts(4, 0, 3, 1, LoaderMode::Eval), 0) == Batches{{0, 1, 2}});
    REQUIRE(epoch(ds, opts(4, 1, 3, 1, LoaderMode::Eval), 0) == Batches{{3, 4, 5}});
    REQUIRE(epoch(ds, opts(4, 2, 3, 1, LoaderMode::Eval), 0) == Batches{{6, 7, 8, 9}});
    REQUIRE(epoch(ds, opts(4, 0, 1, 1, LoaderMode::Eval), 3) == Batches{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}});
}

TEST_CASE("resuming at step k gives steps k.. of the uninterrupted epoch", "[data][loader]") {
    IndexDataset ds(90);
    for (auto mode : {LoaderMode::Train, LoaderMode::Eval}) {
        for (bool prefetch : {true, false}) {
            CAPTURE(int(mode), prefetch);
            const auto o = opts(4, 1, 2, 3, mode, prefetch);
            Batches full = epoch(ds, o, 2);
            for (int64_t k : {int64_t(0), int64_t(1), int64_t(5), int64_t(full.size()) - 1, int64_t(full.size())}) {
                CAPTURE(k);
                Batches rest = epoch(ds, o, 2, k);
                REQUIRE(rest == Batches(full.begin() + k, full.end()));
            }
            // Mid-epoch restart on a loader whose prefetch is in flight.
            ShardedLoader l(ds, o);
            l.start_epoch(0);
            Batch b;
            REQUIRE(l.next(b));
            REQUIRE(l.next(b));
            l.start_epoch(2, 3);
            REQUIRE(l.epoch() == 2);
            REQUIRE(l.step() == 3);
            REQUIRE(drain(l) == Batches(full.begin() + 3, full.end()));
            REQUIRE_THROWS_AS(l.start_epoch(2, int64_t(full.size()) + 1), InputError);
        }
    }
}

TEST_CASE("prefetch on and off give identical batches", "[data][loader]") {
    SyntheticDataset ds({3, 4, 4}, 5, 203, 17);
    for (auto mode : {LoaderMode::Train, LoaderMode::Eval}) {
        ShardedLoader a(ds, opts(16, 1, 3, 2, mode, true));
        ShardedLoader b(ds, opts(16, 1, 3, 2, mode, false));
        for (int64_t e = 0; e < 2; ++e) {
            a.start_epoch(e);
            b.start_epoch(e);
            Batch ba, bb;
            int64_t steps = 0;
            while (true) {
                const bool more = a.next(ba);
                REQUIRE(more == b.next(bb));
                if (!more) break;
                ++steps;
                REQUIRE(ba.x.shape() == bb.x.shape());
                REQUIRE(ba.x.shape()[1] == 3);
                REQUIRE(std::equal(ba.x.span().begin(), ba.x.span().end(), bb.x.span().begin()));
                REQUIRE(std::equal(ba.y.span().begin(), ba.y.span().end(), bb.y.span().begin()));
            }
            REQUIRE(steps == a.steps_per_epoch());
            REQUIRE(!a.next(ba));  // stays at the end
        }
    }
}

TEST_CASE("prefetch double-buffers without allocating in steady state", "[data][loader]") {
    IndexDataset ds(400);
    for (bool prefetch : {true, false}) {
        ShardedLoader l(ds, opts(8, 0, 1, 1, LoaderMode::Train, prefetch));
        Batch b;
        std::set<const float*> buffers;
        for (int e = 0; e < 2; ++e) {
            l.start_epoch(e);
            while (l.next(b)) buffers.insert(b.x.data());
        }
        REQUIRE(buffers.size() == (prefetch ? 2u : 1u));
    }
}

// Records reads into the batch buffer the caller holds: the one a GPU's copy may still be reading.
class FencedDataset : public IndexDataset {
public:
    using IndexDataset::IndexDataset;
    float read(int64_t index, float* x) const override {
        {
            std::lock_guard<std::mutex> lk(mu);
            if (x >= held_begin && x < held_end) ++writes_into_held;
        }
        return IndexDataset::read(index, x);
    }
    mutable std::mutex mu;
    const float* held_begin = nullptr;
    const float* held_end = nullptr;
    mutable int writes_into_held = 0;
};

TEST_CASE("batches fill the buffers allocate_host gives, and one handed out is rewritten only after before_refill",
          "[data][loader]") {
    // What a GPU run relies on (train/trainer.cpp): its uploader copies a batch from the loader's page-locked buffer
    // after next() has returned, so the loader must not write that buffer again before before_refill() has waited.
    FencedDataset ds(203);
    for (auto mode : {LoaderMode::Train, LoaderMode::Eval}) {
        for (bool prefetch : {true, false}) {
            CAPTURE(mode == LoaderMode::Train, prefetch);
            LoaderOptions o = opts(16, 1, 3, 2, mode, prefetch);
            o.prefetch_probe_batches = 0;  // keep the prefetch thread whatever the timing
            std::mutex mu;
            std::set<const float*> given;  // storage allocate_host handed out
            int allocations = 0;
            o.allocate_host = [&](Shape shape) {
                Tensor t(std::move(shape));
                std::lock_guard<std::mutex> lk(mu);
                ++allocations;
                given.insert(t.data());
                return t;
            };
            int refills = 0, labels_changed = 0;
            const float* held_labels = nullptr;  // the held batch's labels, which the loader writes itself
            std::vector<float> held_label_values;
            o.before_refill = [&] {
                ++refills;
                // A copy still running: a loader that wrote before this wait would write into the held buffer now.
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
                if (held_labels && !std::equal(held_label_values.begin(), held_label_values.end(), held_labels))
                    ++labels_changed;
                std::lock_guard<std::mutex> lk(ds.mu);
                ds.held_begin = ds.held_end = nullptr;
            };
            ds.writes_into_held = 0;
            ShardedLoader hooked(ds, o);
            ShardedLoader plain(ds, opts(16, 1, 3, 2, mode, prefetch));
            int64_t batches = 0;
            Batch b, pb;  // kept across epochs, as a training run keeps its batch
            for (int64_t e = 0; e < 2; ++e) {
                hooked.start_epoch(e);
                plain.start_epoch(e);
                while (hooked.next(b)) {
                    {
                        std::lock_guard<std::mutex> lk(ds.mu);
                        ds.held_begin = b.x.data();
                        ds.held_end = b.x.data() + b.x.numel();
                    }
                    held_labels = b.y.data();
                    held_label_values.assign(b.y.span().begin(), b.y.span().end());
                    ++batches;
                    REQUIRE(plain.next(pb));
                    REQUIRE(b.x.shape() == pb.x.shape());
                    REQUIRE(std::equal(b.x.span().begin(), b.x.span().end(), pb.x.span().begin()));
                    REQUIRE(std::equal(b.y.span().begin(), b.y.span().end(), pb.y.span().begin()));
                    std::lock_guard<std::mutex> lk(mu);
                    REQUIRE(given.count(b.x.data()) == 1);
                    REQUIRE(given.count(b.y.data()) == 1);
                }
                REQUIRE(!plain.next(pb));
            }
            REQUIRE(batches > 4);
            REQUIRE(refills == batches - 1);  // before every next() that reuses a buffer handed out
            REQUIRE(ds.writes_into_held == 0);
            REQUIRE(labels_changed == 0);
            // x and y of each buffer in use (two with prefetch), once: a short last batch fits in them.
            REQUIRE(allocations == (prefetch ? 4 : 2));
        }
    }
}

TEST_CASE("an exception while reading a batch surfaces in next()", "[data][loader]") {
    IndexDataset ds(40);
    for (bool prefetch : {true, false}) {
        CAPTURE(prefetch);
        const auto o = opts(4, 0, 1, 9, LoaderMode::Train, prefetch);
        const Batches full = epoch(ds, o, 0);
        ds.throw_at = full[2][1];  // a sample of step 2
        ShardedLoader l(ds, o);
        l.start_epoch(0);
        Batch b;
        REQUIRE(l.next(b));
        REQUIRE(l.next(b));
        REQUIRE_THROWS_WITH(l.next(b), Contains("bad sample " + std::to_string(ds.throw_at)));
        REQUIRE(l.step() == 2);
        REQUIRE_THROWS_WITH(l.next(b), Contains("bad sample"));  // retried, fails again
        ds.throw_at = -1;
        REQUIRE(drain(l) == Batches(full.begin() + 2, full.end()));  // recovers once the data is fixed
        // Failing on the very first batch.
        ds.throw_at = full[0][0];
        l.start_epoch(0);
        REQUIRE_THROWS_WITH(l.next(b), Contains("bad sample"));
        ds.throw_at = -1;
    }
}

TEST_CASE("loader destruction joins the prefetch thread cleanly", "[data][loader]") {
    IndexDataset ds(64);
    ds.sleep_us = 2000;
    {
        ShardedLoader l(ds, opts(16, 0, 1));
        l.start_epoch(0);  // the worker starts on step 0 and is still reading when the loader goes away
    }
    {
        ShardedLoader l(ds, opts(16, 0, 1));  // never started
    }
    {
        ShardedLoader l(ds, opts(4, 0, 1));
        Batch b;
        REQUIRE(l.next(b));
        REQUIRE(l.next(b));
    }
    SUCCEED();
}

TEST_CASE("wait_seconds counts time blocked in next()", "[data][loader]") {
    IndexDataset ds(32);
    ds.sleep_us = 1000;  // 8 ms per batch of 8
    for (bool prefetch : {true, false}) {
        ShardedLoader l(ds, opts(8, 0, 1, 1, LoaderMode::Train, prefetch));
        REQUIRE(l.wait_seconds() == 0.0);
        l.start_epoch(0);
        drain(l);
        REQUIRE(l.wait_seconds() > 0.004);  // at least the first batch is waited for
        REQUIRE(l.wait_seconds() < 5.0);
    }
    // When the caller is slower than the reader, prefetching hides the reads.
    ShardedLoader l(ds, opts(8, 0, 1));
    l.start_epoch(0);
    Batch b;
    REQUIRE(l.next(b));
    const double first = l.wait_seconds();
    while (true) {
        std::this_thread::sleep_for(std::chrono::milliseconds(40));
        if (!l.next(b)) break;
    }
    REQUIRE(l.wait_seconds() - first < 0.02 + 0.5 * first);
}

TEST_CASE("loader rejects bad options with actionable errors", "[data][loader]") {
    IndexDataset ds(10);
    REQUIRE_THROWS_AS(ShardedLoader(ds, opts(0, 0, 1)), InputError);
    REQUIRE_THROWS_WITH(ShardedLoader(ds, opts(4, 0, 3)),
                        Contains("10 samples") && Contains("global batch") && Contains("12"));
    REQUIRE_THROWS_AS(ShardedLoader(ds, opts(4, 3, 3)), Error);
    ShardedLoader ok(ds, opts(4, 0, 3, 1, LoaderMode::Eval));
    REQUIRE(ok.steps_per_epoch() == 1);
    REQUIRE_THROWS_AS(ok.start_epoch(-1), InputError);
}

TEST_CASE("prefetch turns itself off when waiting for it costs more than filling, and the batches stay the same",
          "[data][loader][prefetch]") {
    IndexDataset ds(2000);
    const Batches want = epoch(ds, opts(10, 0, 1, 3, LoaderMode::Train, false), 0);
    // Sample indices of every batch, gathered without work worth mentioning between next() calls.
    auto quick_drain = [](ShardedLoader& l) {
        Batches out;
        Batch b;
        while (l.next(b)) {
            std::vector<int64_t> idx(static_cast<size_t>(b.size()));
            for (int64_t i = 0; i < b.size(); ++i) idx[i] = int64_t(b.x.data()[2 * i]);
            out.push_back(std::move(idx));
        }
        return out;
    };
    SECTION("a caller that does nothing between batches waits for every fill: switched off after the probe") {
        ds.sleep_us = 50;  // a fill takes >= 0.5 ms; the caller then waits that plus the hand-over, every batch
        ShardedLoader l(ds, opts(10, 0, 1, 3, LoaderMode::Train, true));
        l.start_epoch(0);
        CHECK(l.prefetching());
        CHECK(l.prefetch_note() == "on");
        CHECK(quick_drain(l) == want);
        CHECK_FALSE(l.prefetching());
        CHECK_THAT(l.prefetch_note(), Contains("off after 32 batches"));
        // Later epochs fill on the caller's thread and read the same permutation as a loader without prefetch.
        ds.sleep_us = 0;
        l.start_epoch(1);
        CHECK(drain(l) == epoch(ds, opts(10, 0, 1, 3, LoaderMode::Train, false), 1));
    }
    SECTION("a caller that computes between batches never waits: prefetch stays on") {
        ds.sleep_us = 100;  // a fill takes ~1 ms, the caller's "step" 4 ms
        ShardedLoader l(ds, opts(10, 0, 1, 3, LoaderMode::Train, true));
        l.start_epoch(0);
        Batch b;
        for (int i = 0; i < 40 && l.next(b); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(4));
        CHECK(l.prefetching());
    }
    SECTION("prefetch_probe_batches = 0 never switches; prefetch = false says so") {
        LoaderOptions o = opts(10, 0, 1, 3, LoaderMode::Train, true);
        o.prefetch_probe_batches = 0;
        ShardedLoader l(ds, o);
        CHECK(quick_drain(l) == want);
        CHECK(l.prefetching());
        ShardedLoader off(ds, opts(10, 0, 1, 3, LoaderMode::Train, false));
        CHECK_FALSE(off.prefetching());
        CHECK(off.prefetch_note() == "off (data.prefetch false)");
    }
}

TEST_CASE("workers filling a batch together give the batches one thread gives", "[data][loader]") {
    // 512 samples of 8192 floats: 4 M floats per batch, enough for up to 4 workers.
    SyntheticDataset ds({2, 64, 64}, 10, 1100, 5);
    for (auto mode : {LoaderMode::Train, LoaderMode::Eval}) {
        for (bool prefetch : {true, false}) {
            LoaderOptions one = opts(512, 0, 2, 3, mode, prefetch), many = one;
            many.workers = 3;
            ShardedLoader a(ds, one), b(ds, many);
            Batch ba, bb;
            int64_t steps = 0;
            while (a.next(ba)) {
                REQUIRE(b.next(bb));
                ++steps;
                REQUIRE(ba.x.shape() == bb.x.shape());
                REQUIRE(std::equal(ba.x.span().begin(), ba.x.span().end(), bb.x.span().begin()));
                REQUIRE(std::equal(ba.y.span().begin(), ba.y.span().end(), bb.y.span().begin()));
            }
            REQUIRE_FALSE(b.next(bb));
            REQUIRE(steps == a.steps_per_epoch());
        }
    }
}

TEST_CASE("an exception in a worker's share of the batch surfaces in next()", "[data][loader]") {
    // Big enough samples (2^19 floats) that two workers share the batch of 4 (each a contiguous half; sample 3 is in
    // the second).
    class BigDataset : public Dataset {
    public:
        int64_t size() const override { return 8; }
        Shape sample_shape() const override { return {1 << 19}; }
        int64_t num_classes() const override { return 2; }
        float read(int64_t index, float* x) const override {
            if (index == 3) throw std::runtime_error("bad sample 3");
            x[0] = float(index);
            return 0.0f;
        }
        std::string description() const override { return "big dataset"; }
    } ds;
    LoaderOptions o = opts(4, 0, 1, 1, LoaderMode::Eval, false);
    o.workers = 2;
    ShardedLoader loader(ds, o);
    Batch b;
    REQUIRE_THROWS_WITH(loader.next(b), Contains("bad sample 3"));
}

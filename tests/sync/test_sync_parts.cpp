// The parts of GradientSync that need no MPI: BucketLayout (sizes and ready times in, buckets out) and
// StallInspector (when it warns, what it says, when it aborts).
#include <catch2/catch.hpp>

#include <vector>

#include "../../src/sync/bucket_reducer.hpp"  // SharedSyncStats, private to the sync layer
#include "fake_communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/sync/bucket_layout.hpp"
#include "ringtrain/sync/stall_inspector.hpp"

using namespace ringtrain;
using sync::BucketLayout;

namespace {

// The sync tests' parameter sizes (a small CNN's), in floats.
std::vector<size_t> cnn_sizes() { return {72, 8, 1152, 16, 19200, 64, 640, 10, 1, 70001}; }

std::vector<std::vector<size_t>> all_params(const BucketLayout& l) {
    std::vector<std::vector<size_t>> out;
    for (size_t b = 0; b < l.size(); ++b) out.push_back(l.params(b));
    return out;
}

}  // namespace

TEST_CASE("BucketLayout by size: backward order, the fusion cap, big tensors alone, contiguous slots", "[sync][layout]") {
    using Want = std::vector<std::vector<size_t>>;
    CHECK(all_params(BucketLayout::by_size(cnn_sizes(), 64u << 20)) == Want{{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}});
    CHECK(all_params(BucketLayout::by_size(cnn_sizes(), 0)) == Want{{9}, {8}, {7}, {6}, {5}, {4}, {3}, {2}, {1}, {0}});
    const BucketLayout l = BucketLayout::by_size(cnn_sizes(), 4096);
    CHECK(all_params(l) == Want{{9}, {8, 7, 6, 5}, {4}, {3}, {2}, {1, 0}});
    CHECK(l.tensors_per_bucket() == std::vector<size_t>{1, 4, 1, 1, 1, 2});
    CHECK(l.total_floats() == 91164);
    CHECK(l.largest_bucket_floats() == 70001);
    // The arena is the buckets back to back, each bucket its slots back to back.
    size_t offset = 0;
    for (const sync::Bucket& b : l.buckets()) {
        CHECK(b.offset == offset);
        size_t count = 0;
        for (const sync::BucketSlot& s : b.slots) {
            CHECK(s.offset == offset + count);
            CHECK(s.count == cnn_sizes()[s.param]);
            CHECK(l.slot_of(s.param).offset == s.offset);
            CHECK(&l.bucket(l.bucket_of(s.param)) == &b);
            count += s.count;
        }
        CHECK(b.count == count);
        offset += count;
    }
    // No overflow: two gradients whose bytes add up past SIZE_MAX do not share a bucket under an unbounded cap.
    const BucketLayout huge = BucketLayout::by_size({SIZE_MAX / 6, SIZE_MAX / 6}, SIZE_MAX);
    CHECK(huge.size() == 2);
}

TEST_CASE("BucketLayout by time: a gap longer than the cycle closes a bucket once it holds the minimum", "[sync][layout]") {
    using Want = std::vector<std::vector<size_t>>;
    // Reported last parameter first, 1 ms apart, with 200 ms gaps before p6 and before p2.
    std::vector<double> ready(10);
    double t = 0;
    for (size_t k = ready.size(); k-- > 0;) {
        t += (k == 6 || k == 2) ? 0.2 : 0.001;
        ready[k] = t;
    }
    CHECK(all_params(BucketLayout::by_time(cnn_sizes(), 64u << 20, 0, 50, ready)) == Want{{9, 8, 7}, {6, 5, 4, 3}, {2, 1, 0}});
    // p9..p7 hold 280 KB, under a 300 KB minimum: the first gap does not close them.
    CHECK(all_params(BucketLayout::by_time(cnn_sizes(), 64u << 20, 300000, 50, ready)) ==
          Want{{9, 8, 7, 6, 5, 4, 3}, {2, 1, 0}});
    // Both rules at once: the 4 KiB cap's buckets, and {8, 7, 6, 5} split at the gap before p6.
    CHECK(all_params(BucketLayout::by_time(cnn_sizes(), 4096, 0, 50, ready)) ==
          Want{{9}, {8, 7}, {6, 5}, {4}, {3}, {2}, {1, 0}});
    // A cycle longer than every gap: the size layout.
    CHECK(all_params(BucketLayout::by_time(cnn_sizes(), 64u << 20, 0, 500, ready)) == Want{{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}});
    CHECK_THROWS_AS(BucketLayout::by_time(cnn_sizes(), 64u << 20, 0, 50, std::vector<double>(3, 0.0)), Error);
}

TEST_CASE("BucketLayout from tensors per bucket: what rank 0 sends, checked", "[sync][layout]") {
    const std::vector<size_t> tensors = {3, 4, 3};
    const BucketLayout l(cnn_sizes(), tensors);
    CHECK(l.params(1) == std::vector<size_t>{6, 5, 4, 3});
    CHECK(l.tensors_per_bucket() == tensors);
    CHECK_THROWS_AS(BucketLayout(cnn_sizes(), std::vector<size_t>{3, 4}), Error);
    CHECK_THROWS_AS(BucketLayout(cnn_sizes(), std::vector<size_t>{3, 4, 0, 3}), Error);
}

TEST_CASE("StallInspector: warns once past the warning, aborts past the abort limit, with the stall text",
          "[sync][stall]") {
    sync_test::FakeComm comm;
    const sync::CollectiveTag tag{2, 1u << 18, 7};  // 1 MiB
    CHECK(sync::StallInspector::describe(tag, 3.04) ==
          "allreduce of bucket 2 (1.00 MiB, step 7) has not completed after 3.0 s");
    // Another collective names itself; below 0.1 MiB its payload is in KiB (a sparse step moves kilobytes).
    CHECK(sync::StallInspector::describe({0, 768, 9, "the sparse gradient exchange"}, 2.0) ==
          "the sparse gradient exchange (3.0 KiB, step 9) has not completed after 2.0 s");
    CHECK(sync::StallInspector::describe({0, 1u << 19, 9, "the local SGD parameter average"}, 2.0) ==
          "the local SGD parameter average (2.00 MiB, step 9) has not completed after 2.0 s");
    CHECK(sync::StallInspector::describe({0, 8, 9, "the step's opening allreduce"}, 2.0) ==
          "the step's opening allreduce (32 B, step 9) has not completed after 2.0 s");
    CHECK(sync::StallInspector::describe({0, 6, -1, "the synchronised BatchNorm statistics' allreduce"}, 2.0) ==
          "the synchronised BatchNorm statistics' allreduce (24 B) has not completed after 2.0 s");
    CHECK(sync::StallInspector::describe({0, 0, -1, "a wait"}, 2.0) == "a wait has not completed after 2.0 s");
    CHECK(sync::StallInspector::describe({0, 0, 9, "the next batch's read"}, 2.0) ==
          "the next batch's read (step 9) has not completed after 2.0 s");

    sync::StallInspector both(comm, 1.0, 2.5);
    CHECK(both.enabled());
    CHECK(both.poll_period_s() == Approx(0.1));
    bool warned = false;
    CHECK_FALSE(both.inspect(tag, 0.5, warned));
    CHECK_FALSE(warned);
    CHECK(both.inspect(tag, 1.2, warned));  // prints the warning
    CHECK(warned);
    CHECK_FALSE(both.inspect(tag, 2.0, warned));  // once per collective
    CHECK_THROWS_WITH(both.inspect(tag, 3.04, warned),
                      "abort: allreduce of bucket 2 (1.00 MiB, step 7) has not completed after 3.0 s; aborting the job "
                      "(sync.stall_abort_s = 2.5)");
    CHECK_THROWS_WITH(both.abort_with(tag, 3.04, "NCCL error"),
                      "abort: allreduce of bucket 2 (1.00 MiB, step 7) has not completed after 3.0 s: NCCL error");

    sync::StallInspector off(comm, 0, -1);
    CHECK_FALSE(off.enabled());
    bool never = false;
    CHECK_FALSE(off.inspect(tag, 1e9, never));
    CHECK_FALSE(never);
    // The poll period: a tenth of the shorter limit, 1 ms to 1 s.
    CHECK(sync::StallInspector(comm, 60, 0).poll_period_s() == 1.0);
    CHECK(sync::StallInspector(comm, 0, 0.005).poll_period_s() == 1e-3);
}

TEST_CASE("SharedSyncStats: a time reported after a reset for a collective issued before it is dropped",
          "[sync][stats]") {
    // The device path learns a bucket's time a step late: step 0's time arrives after the reset that leaves step 0
    // out, and must not be added to the calls counted from step 1 on.
    const std::vector<size_t> tensors{2};
    const BucketLayout layout({10, 20}, tensors);
    sync::SharedSyncStats stats;
    stats.reset_buckets(layout);
    const uint64_t step0 = stats.collective_issued(0);
    stats.reset_buckets(layout);  // after the first step
    const uint64_t step1 = stats.collective_issued(0);
    stats.collective_time(0, 5.0, step0);  // the warm-up's slow collective, reported late
    stats.collective_time(0, 0.25, step1);
    const sync::SyncStats s = stats.snapshot();
    REQUIRE(s.buckets.size() == 1);
    CHECK(s.buckets[0].calls == 1);
    CHECK(s.buckets[0].total_s == Approx(0.25));
    CHECK(s.buckets[0].bytes == 30 * sizeof(float));
}

// GradientSync v2 and ParameterAverager under mpirun at 1–4 ranks. Every rank regenerates every rank's gradients
// from seeds, so the exact average is known locally; a direct per-tensor allreduce on a separate communicator of the
// same backend is the reference the fusion/overlap variants are compared with.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>
#include <thread>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/sync/gradient_sync.hpp"
#include "fake_communicator.hpp"
#include "sync_test_util.hpp"

using namespace ringtrain;
using namespace sync_test;
using sync::GradientSync;
using sync::SyncOptions;

namespace {

// Everything in one bucket, reduced on the calling thread (what the removed "first version" constructor gave).
SyncOptions one_blocking_bucket() {
    SyncOptions o;
    o.fusion_bytes = std::numeric_limits<size_t>::max();
    o.overlap = false;
    return o;
}

// One backward pass as the trainer drives it: gradients reported last parameter first, with a little "compute"
// between them so the communication thread really runs while they arrive.
void backward(GradientSync& gs, ParamSet& ps, bool pause = true) {
    for (size_t k = ps.ptrs.size(); k-- > 0;) {
        gs.on_gradient_ready(*ps.ptrs[k]);
        if (pause) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

// Exact average over the ranks (double) and the bound of a float32 allreduce of it.
struct Exact {
    std::vector<std::vector<double>> mean, abs_mean;
};
Exact exact_average(const ParamSet& ps, int64_t step, uint64_t seed) {
    const int n = world_size();
    Exact e;
    for (size_t i = 0; i < ps.ptrs.size(); ++i) {
        const size_t count = static_cast<size_t>(ps.ptrs[i]->grad.numel());
        std::vector<double> m(count, 0.0), a(count, 0.0);
        for (int r = 0; r < n; ++r) {
            const auto v = grad_values(count, r, step, i, seed);
            for (size_t j = 0; j < count; ++j) m[j] += v[j] / n, a[j] += std::fabs(v[j]) / n;
        }
        e.mean.push_back(std::move(m));
        e.abs_mean.push_back(std::move(a));
    }
    return e;
}

// Float32 sums of N terms: (N−1)·2^-24·Σ|x| worst case, doubled, plus the scaling's rounding.
size_t count_outside(const ParamSet& ps, const Exact& e, double unit = std::ldexp(1.0, -24), int roundings = -1) {
    const int n = world_size();
    const int k = roundings >= 0 ? roundings : std::max(n - 1, 1);
    size_t bad = 0;
    for (size_t i = 0; i < ps.ptrs.size(); ++i) {
        const float* g = ps.ptrs[i]->grad.data();
        for (size_t j = 0; j < e.mean[i].size(); ++j) {
            const double tol = 2.0 * k * unit * e.abs_mean[i][j] + std::ldexp(std::fabs(e.mean[i][j]), -23) +
                               (unit > std::ldexp(1.0, -20) ? k * std::ldexp(1.0, -25) : 0.0);
            if (!(std::fabs(g[j] - e.mean[i][j]) <= tol)) ++bad;
        }
    }
    return bad;
}

// The per-tensor reference: each gradient allreduced on its own.
void reference_sync(comm::Communicator& comm, ParamSet& ps) {
    if (comm.size() == 1) return;
    for (auto* p : ps.ptrs) comm.allreduce(p->grad.span(), comm::ReduceOp::Average);
}

bool same_on_all_ranks(comm::Communicator& comm, uint64_t h) {
    const auto all = comm.allgather(h);
    return std::all_of(all.begin(), all.end(), [&](uint64_t x) { return x == all[0]; });
}

// Redirects this process's stderr (fd 2) to a temporary file until finish().
class StderrCapture {
public:
    StderrCapture() {
        std::fflush(stderr);
        char name[] = "/tmp/ringtrain_stderr_XXXXXX";
        const int fd = mkstemp(name);
        REQUIRE(fd >= 0);
        path_ = name;
        saved_ = dup(2);
        dup2(fd, 2);
        close(fd);
    }
    std::string finish() {
        std::fflush(stderr);
        dup2(saved_, 2);
        close(saved_);
        std::ifstream in(path_);
        std::stringstream ss;
        ss << in.rdbuf();
        std::remove(path_.c_str());
        return ss.str();
    }

private:
    std::string path_;
    int saved_ = -1;
};

struct Config {
    const char* name;
    size_t fusion;
    bool overlap;
};

}  // namespace

TEST_CASE("bucket layout: backward order, fusion threshold, big tensors alone", "[sync][layout]") {
    ParamSet ps;  // sizes: 72 8 1152 16 19200 64 640 10 1 70001 floats
    {
        GradientSync gs(comm::make_communicator("ring"), ps.ptrs, SyncOptions{});
        REQUIRE(gs.bucket_count() == 1);
        const auto b0 = gs.bucket_params(0);
        REQUIRE(b0.size() == ps.ptrs.size());
        for (size_t k = 0; k < b0.size(); ++k) CHECK(b0[k] == ps.ptrs.size() - 1 - k);  // last parameter first
    }
    {
        GradientSync gs(comm::make_communicator("ring"), ps.ptrs, SyncOptions{0, true});
        REQUIRE(gs.bucket_count() == ps.ptrs.size());
        for (size_t b = 0; b < gs.bucket_count(); ++b) CHECK(gs.bucket_params(b) == std::vector<size_t>{ps.ptrs.size() - 1 - b});
        CHECK(gs.stats().buckets.size() == ps.ptrs.size());
    }
    {
        // 4 KiB, greedy in backward order: p9 (280 KB) alone; p8+p7+p6+p5 = 2860 B; p4 (76.8 KB) alone; p3 (64 B)
        // cannot take p2 (4608 B), which is then over the cap on its own; p1+p0 = 320 B.
        GradientSync gs(comm::make_communicator("ring"), ps.ptrs, SyncOptions{4096, true});
        std::vector<std::vector<size_t>> want = {{9}, {8, 7, 6, 5}, {4}, {3}, {2}, {1, 0}};
        REQUIRE(gs.bucket_count() == want.size());
        for (size_t b = 0; b < want.size(); ++b) CHECK(gs.bucket_params(b) == want[b]);
        const auto st = gs.stats();
        CHECK(st.buckets[0].bytes == 70001 * 4);
        CHECK(st.buckets[1].tensors == 4);
    }
    // An unbounded fusion size: one bucket, blocking.
    GradientSync blocking(comm::make_communicator("ring"), ps.ptrs, one_blocking_bucket());
    CHECK(blocking.bucket_count() == 1);
    CHECK_FALSE(blocking.overlapping());
    // A parameter listed twice is refused.
    std::vector<nn::Parameter*> twice = {ps.ptrs[0], ps.ptrs[1], ps.ptrs[0]};
    CHECK_THROWS_AS(GradientSync(comm::make_communicator("ring"), twice, SyncOptions{}), Error);
}

TEST_CASE("cycle-time layout: rank 0's first-step timing splits the buckets, the same on every rank", "[sync][layout]") {
    const int n = world_size(), me = world_rank();
    auto check_comm = comm::make_communicator("ring");
    SyncOptions opt{64u << 20, true};
    opt.cycle_time_ms = 50;
    opt.min_bucket_bytes = 0;
    // Rank 0 pauses 200 ms before p6 and before p2; every other rank reports without pauses.
    auto first_step = [&](GradientSync& gs, ParamSet& ps) {
        fill_grads(ps, me, 0, 3);
        for (size_t k = ps.ptrs.size(); k-- > 0;) {
            if (me == 0 && (k == 6 || k == 2)) std::this_thread::sleep_for(std::chrono::milliseconds(200));
            gs.on_gradient_ready(*ps.ptrs[k]);
        }
        gs.synchronize();
        CHECK(count_outside(ps, exact_average(ps, 0, 3)) == 0);
    };
    SECTION("a gap closes a bucket only once it holds min_bucket_bytes") {
        // p9..p7 hold 280 KB, under the 300 KB minimum, so the gap before p6 does not close them; the one before p2 does.
        opt.min_bucket_bytes = 300000;
        ParamSet ps;
        GradientSync gs(comm::make_communicator("ring"), ps.ptrs, opt);
        first_step(gs, ps);
        if (n > 1) {
            REQUIRE(gs.bucket_count() == 2);
            CHECK(gs.bucket_params(0) == std::vector<size_t>{9, 8, 7, 6, 5, 4, 3});
            CHECK(gs.bucket_params(1) == std::vector<size_t>{2, 1, 0});
        }
    }
    SECTION("gaps longer than the cycle on rank 0 close buckets; other ranks' timing does not matter") {
        ParamSet ps;
        GradientSync gs(comm::make_communicator("ring"), ps.ptrs, opt);
        REQUIRE(gs.bucket_count() == 1);  // the first step runs with the size layout, blocking
        CHECK_FALSE(gs.overlapping());
        first_step(gs, ps);
        if (n > 1) {
            const std::vector<std::vector<size_t>> want = {{9, 8, 7}, {6, 5, 4, 3}, {2, 1, 0}};
            REQUIRE(gs.bucket_count() == want.size());
            for (size_t b = 0; b < want.size(); ++b) CHECK(gs.bucket_params(b) == want[b]);
            CHECK(gs.overlapping() == comm::mpi_thread_multiple());
            CHECK(gs.stats().buckets.size() == 3);
        } else {
            CHECK(gs.bucket_count() == 1);  // one rank: nothing is reduced, nothing re-laid out
        }
        // The new layout averages correctly (and identically on every rank) from the next step on.
        for (int64_t step = 1; step < 4; ++step) {
            fill_grads(ps, me, step, 3);
            backward(gs, ps);
            gs.synchronize();
            INFO("step " << step);
            CHECK(count_outside(ps, exact_average(ps, step, 3)) == 0);
            CHECK(same_on_all_ranks(*check_comm, grad_hash(ps)));
        }
        if (n > 1) CHECK(gs.stats().collectives == 1 + 3 * 3);
    }
    SECTION("rank 0 did not see every gradient reported in the first step: the size layout stays") {
        ParamSet ps;
        GradientSync gs(comm::make_communicator("ring"), ps.ptrs, opt);
        fill_grads(ps, me, 0, 4);
        if (me != 0) backward(gs, ps, false);  // rank 0 reports nothing; synchronize packs for it
        gs.synchronize();
        CHECK(count_outside(ps, exact_average(ps, 0, 4)) == 0);
        CHECK(gs.bucket_count() == 1);
        CHECK_FALSE(gs.overlapping());
    }
}

TEST_CASE("fused, unfused, tiny buckets, overlap on and off: the per-tensor allreduce's average", "[sync][average]") {
    const int n = world_size(), me = world_rank();
    const Config configs[] = {
        {"fused 64 MiB, overlap", 64u << 20, true}, {"fused 64 MiB, blocking", 64u << 20, false},
        {"unfused, overlap", 0, true},              {"unfused, blocking", 0, false},
        {"1 KiB buckets, overlap", 1024, true},     {"1 KiB buckets, blocking", 1024, false},
        {"100 KiB buckets, overlap", 100 * 1024, true},
    };
    for (const char* backend : {"ring", "mpi"}) {
        auto check_comm = comm::make_communicator(backend);
        // Results of each config, per step, to compare overlap on/off bitwise.
        std::vector<std::vector<uint64_t>> hashes;
        for (const Config& c : configs) {
            ParamSet ps, ref;
            GradientSync gs(comm::make_communicator(backend), ps.ptrs, SyncOptions{c.fusion, c.overlap});
            CHECK(gs.overlapping() == (c.overlap && n > 1 && gs.bucket_count() > 1));
            std::vector<uint64_t> h;
            for (int64_t step = 0; step < 3; ++step) {
                gs.begin_step(step);
                fill_grads(ps, me, step, 11);
                fill_grads(ref, me, step, 11);
                backward(gs, ps);
                gs.synchronize();
                reference_sync(*check_comm, ref);
                const Exact e = exact_average(ps, step, 11);
                INFO(backend << " / " << c.name << " step " << step);
                CHECK(count_outside(ps, e) == 0);
                CHECK(same_on_all_ranks(*check_comm, grad_hash(ps)));
                if (c.fusion == 0 || n == 1) {
                    // Same backend, same layout (one tensor per collective): bitwise the reference.
                    CHECK(grad_hash(ps) == grad_hash(ref));
                }
                h.push_back(grad_hash(ps));
            }
            const auto st = gs.stats();
            CHECK(st.steps == 3);
            CHECK(st.collectives == (n > 1 ? 3 * gs.bucket_count() : 0));
            for (const auto& b : st.buckets) {
                CHECK(b.calls == (n > 1 ? 2u : 0u));  // the first step is left out of the buckets' times
                if (n > 1 && b.bytes > 0) CHECK(b.busbw_gbs(n) > 0);
            }
            if (n > 1) CHECK(gs.communicator().bytes_sent() > 0);
            hashes.push_back(h);
        }
        // Overlap on and off: the same bucket layout, so bitwise the same results.
        CHECK(hashes[0] == hashes[1]);
        CHECK(hashes[2] == hashes[3]);
        CHECK(hashes[4] == hashes[5]);
    }
    // One unbounded bucket, blocking, equals the fused configs.
    ParamSet ps, fused;
    sync::GradientSync blocking(comm::make_communicator("ring"), ps.ptrs, one_blocking_bucket());
    sync::GradientSync v2(comm::make_communicator("ring"), fused.ptrs, SyncOptions{});
    for (int64_t step = 0; step < 2; ++step) {
        fill_grads(ps, me, step, 5);
        fill_grads(fused, me, step, 5);
        backward(blocking, ps, false);
        blocking.synchronize();
        backward(v2, fused, false);
        v2.synchronize();
        CHECK(grad_hash(ps) == grad_hash(fused));
        CHECK(count_outside(ps, exact_average(ps, step, 5)) == 0);
    }
}

TEST_CASE("gradients not reported in a step are packed by synchronize (any order, any subset, per rank)",
          "[sync][partial]") {
    const int me = world_rank();
    auto check_comm = comm::make_communicator("ring");
    for (const Config& c : {Config{"1 KiB, overlap", 1024, true}, Config{"1 KiB, blocking", 1024, false},
                            Config{"fused, overlap", 64u << 20, true}, Config{"unfused, overlap", 0, true}}) {
        ParamSet ps, full;
        GradientSync gs(comm::make_communicator("ring"), ps.ptrs, SyncOptions{c.fusion, c.overlap});
        GradientSync gs_full(comm::make_communicator("ring"), full.ptrs, SyncOptions{c.fusion, c.overlap});
        for (int64_t step = 0; step < 4; ++step) {
            fill_grads(ps, me, step, 23);
            fill_grads(full, me, step, 23);
            // Step 0: a rank-dependent subset in a rank-dependent order; step 1: nothing reported; step 2: forward
            // order (first parameter first); step 3: everything, backward order.
            std::vector<size_t> report;
            for (size_t i = 0; i < ps.ptrs.size(); ++i) {
                if (step == 0 && (i + me) % 3 != 0) report.push_back(i);
                if (step == 2 || step == 3) report.push_back(i);
            }
            if (step == 0) std::rotate(report.begin(), report.begin() + (me % std::max<size_t>(report.size(), 1)), report.end());
            if (step == 3) std::reverse(report.begin(), report.end());
            for (size_t i : report) gs.on_gradient_ready(*ps.ptrs[i]);
            gs.synchronize();
            backward(gs_full, full, false);
            gs_full.synchronize();
            INFO(c.name << " step " << step);
            CHECK(grad_hash(ps) == grad_hash(full));  // same layout, same arithmetic
            CHECK(count_outside(ps, exact_average(ps, step, 23)) == 0);
            CHECK(same_on_all_ranks(*check_comm, grad_hash(ps)));
        }
    }
}

TEST_CASE("misuse is reported: a gradient twice in one step, a parameter that is not synchronised", "[sync][errors]") {
    if (world_size() == 1) return;  // nothing is tracked on one rank (communication is skipped)
    ParamSet ps;
    nn::Parameter stranger{"stranger", Tensor::zeros({3}), Tensor::zeros({3})};
    for (bool overlap : {true, false}) {
        GradientSync gs(comm::make_communicator("ring"), ps.ptrs, SyncOptions{1024, overlap});
        fill_grads(ps, world_rank(), 0, 3);
        gs.on_gradient_ready(*ps.ptrs[9]);
        CHECK_THROWS_AS(gs.on_gradient_ready(*ps.ptrs[9]), Error);
        CHECK_THROWS_WITH(gs.on_gradient_ready(stranger), Catch::Contains("stranger"));
        gs.synchronize();  // still a complete, consistent step on every rank
        CHECK(count_outside(ps, exact_average(ps, 0, 3)) == 0);
    }
}

TEST_CASE("fp16 and bf16 on the wire: within 16-bit rounding, half the bytes", "[sync][compression]") {
    const int n = world_size(), me = world_rank();
    for (comm::WireFormat w : {comm::WireFormat::Float16, comm::WireFormat::BFloat16}) {
        for (const char* backend : {"ring", "mpi"}) {
            ParamSet a, b;
            SyncOptions full{1024 * 64, true};
            SyncOptions half = full;
            half.wire = w;
            GradientSync g32(comm::make_communicator(backend), a.ptrs, full);
            GradientSync g16(comm::make_communicator(backend), b.ptrs, half);
            fill_grads(a, me, 0, 41);
            fill_grads(b, me, 0, 41);
            backward(g32, a, false);
            g32.synchronize();
            backward(g16, b, false);
            g16.synchronize();
            const double unit = w == comm::WireFormat::Float16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
            INFO(backend << " " << comm::wire_format_name(w));
            // Up to N+3 16-bit roundings of partial sums (see tests/comm/test_comm_compressed.cpp), times N for the
            // bound in terms of the mean of |x|.
            CHECK(count_outside(b, exact_average(b, 0, 41), unit, n == 1 ? 0 : n * (n + 3)) == 0);
            CHECK(2 * g16.communicator().bytes_sent() == g32.communicator().bytes_sent());
            CHECK(2 * g16.communicator().bytes_received() == g32.communicator().bytes_received());
        }
    }
}

TEST_CASE("a rank that sleeps past stall_warning_s makes the waiting ranks warn", "[sync][stall]") {
    const int n = world_size(), me = world_rank();
    if (n == 1) return;
    for (bool overlap : {true, false}) {
        ParamSet ps;
        SyncOptions opt{64u << 20, overlap};
        opt.stall_warning_s = 0.5;
        GradientSync gs(comm::make_communicator("ring"), ps.ptrs, opt);
        gs.begin_step(7);
        fill_grads(ps, me, 7, 1);
        StderrCapture cap;
        if (me == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        backward(gs, ps, false);
        gs.synchronize();
        const std::string err = cap.finish();
        std::fputs(err.c_str(), stderr);  // keep it visible in the test log
        INFO("overlap " << overlap << ", rank " << me << " stderr: " << err);
        if (me != 1) {
            const std::string want = "ringtrain: rank " + std::to_string(me) + ": warning: allreduce of bucket 0 (";
            CHECK(err.find(want) != std::string::npos);
            CHECK(err.find("MiB, step 7) has not completed after ") != std::string::npos);
            // The shared-memory path knows who has not arrived: the sleeping rank.
            CHECK(err.find(" s; waiting for rank 1; a rank may be stuck or dead\n") != std::string::npos);
            // Printed once per stalled collective.
            CHECK(err.find(want) == err.rfind(want));
            CHECK(gs.stats().blocked_s > 0.5);
        }
        CHECK(count_outside(ps, exact_average(ps, 7, 1)) == 0);
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

TEST_CASE("buckets are reduced in bucket order whatever order gradients arrive in; comm-thread errors rethrow",
          "[sync][order][errors]") {
    ParamSet ps;
    for (bool overlap : {true, false}) {
        auto owned = std::make_unique<FakeComm>();
        FakeComm* fc = owned.get();
        fc->fail_at = 9;  // the second step's third bucket (6 buckets per step)
        GradientSync gs(std::move(owned), ps.ptrs, SyncOptions{4096, overlap});
        REQUIRE(gs.bucket_count() == 6);
        // Forward order: bucket 4 fills first, but bucket 0 must go first.
        for (auto* p : ps.ptrs) gs.on_gradient_ready(*p);
        gs.synchronize();
        const std::vector<size_t> want = {70001, 1 + 10 + 640 + 64, 19200, 16, 1152, 8 + 72};
        CHECK(fc->sizes == want);
        for (auto* p : ps.ptrs) gs.on_gradient_ready(*p);
        CHECK_THROWS_WITH(gs.synchronize(), Catch::Contains("injected allreduce failure"));
        if (overlap) CHECK_THROWS_WITH(gs.synchronize(), Catch::Contains("injected allreduce failure"));
    }  // destructors join cleanly
}

TEST_CASE("ParameterAverager makes every rank's parameters the average", "[sync][local_sgd]") {
    const int n = world_size(), me = world_rank();
    auto comm = comm::make_communicator("ring");
    for (size_t fusion : {size_t{64} << 20, size_t{0}, size_t{2048}}) {
        ParamSet ps;
        for (size_t i = 0; i < ps.ptrs.size(); ++i) {
            const auto v = grad_values(static_cast<size_t>(ps.ptrs[i]->value.numel()), me, 99, i, 77);
            std::copy(v.begin(), v.end(), ps.ptrs[i]->value.data());
        }
        sync::ParameterAverager avg(*comm, ps.ptrs, fusion);
        avg.average();
        INFO("fusion " << fusion);
        uint64_t h = 1469598103934665603ull;
        size_t bad = 0;
        for (size_t i = 0; i < ps.ptrs.size(); ++i) {
            h = fnv1a(ps.ptrs[i]->value.span(), h);
            const size_t count = static_cast<size_t>(ps.ptrs[i]->value.numel());
            std::vector<double> mean(count, 0.0), amean(count, 0.0);
            for (int r = 0; r < n; ++r) {
                const auto v = grad_values(count, r, 99, i, 77);
                for (size_t j = 0; j < count; ++j) mean[j] += v[j] / n, amean[j] += std::fabs(v[j]) / n;
            }
            for (size_t j = 0; j < count; ++j)
                bad += !(std::fabs(ps.ptrs[i]->value.data()[j] - mean[j]) <=
                         2.0 * std::max(n - 1, 1) * std::ldexp(amean[j], -24) + std::ldexp(std::fabs(mean[j]), -23));
        }
        CHECK(bad == 0);
        CHECK(same_on_all_ranks(*comm, h));
        if (n == 1) CHECK(avg.collectives() == 0);
        else if (fusion == 0) CHECK(avg.collectives() == ps.ptrs.size());
        else if (fusion == (size_t{64} << 20)) CHECK(avg.collectives() == 1);
    }
}

TEST_CASE("ParameterAverager's averaged copies are average()'s bits and leave the parameters alone",
          "[sync][local_sgd]") {
    const int me = world_rank();
    auto comm = comm::make_communicator("ring");
    for (size_t fusion : {size_t{64} << 20, size_t{0}, size_t{2048}}) {
        INFO("fusion " << fusion);
        ParamSet ps;
        for (size_t i = 0; i < ps.ptrs.size(); ++i) {
            const auto v = grad_values(static_cast<size_t>(ps.ptrs[i]->value.numel()), me, 31, i, 5);
            std::copy(v.begin(), v.end(), ps.ptrs[i]->value.data());
        }
        sync::ParameterAverager avg(*comm, ps.ptrs, fusion);
        const std::vector<Tensor> copies = avg.averaged_copies();
        CHECK(avg.collectives() == 0);  // counted per average() only (the run's prediction divides by averages)
        REQUIRE(copies.size() == ps.ptrs.size());
        size_t untouched = 0;
        for (size_t i = 0; i < ps.ptrs.size(); ++i) {
            const auto v = grad_values(static_cast<size_t>(ps.ptrs[i]->value.numel()), me, 31, i, 5);
            untouched += std::equal(v.begin(), v.end(), ps.ptrs[i]->value.data());
        }
        CHECK(untouched == ps.ptrs.size());
        avg.average();
        size_t same = 0;
        for (size_t i = 0; i < ps.ptrs.size(); ++i)
            same += copies[i].shape() == ps.ptrs[i]->value.shape() &&
                    std::equal(copies[i].data(), copies[i].data() + copies[i].numel(), ps.ptrs[i]->value.data());
        CHECK(same == ps.ptrs.size());
    }
}

// Hidden (tag [.]): brings the job down. Run by the ctest entry test_sync_stall_abort, which expects the message.
TEST_CASE("stall_abort_s takes the job down with the stall message", "[.][stall_abort]") {
    const int me = world_rank();
    if (world_size() == 1) return;
    ParamSet ps;
    SyncOptions opt{64u << 20, true};
    opt.stall_warning_s = 0.2;
    opt.stall_abort_s = 0.6;
    GradientSync gs(comm::make_communicator("ring"), ps.ptrs, opt);
    gs.begin_step(3);
    if (me == 1) std::this_thread::sleep_for(std::chrono::seconds(30));
    backward(gs, ps, false);
    gs.synchronize();
    FAIL("the stall should have aborted the job");
}

TEST_CASE("reduce_single_rank runs the collectives at any world size, with the same result", "[sync][average]") {
    const int n = world_size(), me = world_rank();
    for (const char* backend : {"ring", "mpi"}) {
        for (const Config& c : {Config{"1 KiB buckets, overlap", 1024, true}, Config{"fused, blocking", 64u << 20, false}}) {
            ParamSet ps, plain;
            SyncOptions opt{c.fusion, c.overlap};
            opt.reduce_single_rank = true;
            GradientSync gs(comm::make_communicator(backend), ps.ptrs, opt);
            GradientSync gs_plain(comm::make_communicator(backend), plain.ptrs, SyncOptions{c.fusion, c.overlap});
            CHECK(!gs.on_device());
            CHECK(gs.overlapping() == (c.overlap && gs.bucket_count() > 1));
            for (int64_t step = 0; step < 2; ++step) {
                fill_grads(ps, me, step, 17);
                fill_grads(plain, me, step, 17);
                const uint64_t input = grad_hash(ps);
                backward(gs, ps, false);
                gs.synchronize();
                backward(gs_plain, plain, false);
                gs_plain.synchronize();
                INFO(backend << " / " << c.name << " step " << step);
                // Same layout, same backend: bitwise the result without the option; on one rank, the input itself.
                CHECK(grad_hash(ps) == grad_hash(plain));
                if (n == 1) CHECK(grad_hash(ps) == input);
            }
            CHECK(gs.stats().collectives == 2 * gs.bucket_count());
            CHECK(gs_plain.stats().collectives == (n > 1 ? 2 * gs.bucket_count() : 0));
        }
    }
}

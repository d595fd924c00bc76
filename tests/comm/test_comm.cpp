// Communicator tests, run under mpirun at 1–4 ranks. Each rank generates every rank's random input from seeds, so
// the exact result is computed locally in double and compared with what the collective returned.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/launch_env.hpp"
#include "ringtrain/comm/mpi_communicator.hpp"
#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/comm/ring_communicator.hpp"
#include "ringtrain/comm/shared_memory_allreduce.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/rng.hpp"
#include "serial_reference.hpp"

using namespace ringtrain;
using namespace ringtrain::comm;
using namespace rt_test;

namespace {


// Worst-case rounding of an N-term float sum: (N−1)·u·Σ|x|, u = 2^−24; we allow twice that (plus one ulp of the
// average's scaling).
double sum_tolerance(double sum_abs, int n) { return 2.0 * std::max(n - 1, 1) * std::ldexp(sum_abs, -24); }

uint64_t fnv1a(std::span<const float> v) {
    uint64_t h = 1469598103934665603ull;
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t i = 0; i < v.size_bytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

// Counts (not per-element CHECKs) so a failure prints once, and never skips a collective on one rank only.
struct Mismatch {
    size_t bad = 0;
    size_t first = 0;
    double got = 0, want = 0;
    void add(size_t i, double g, double w) {
        if (bad++ == 0) {
            first = i;
            got = g;
            want = w;
        }
    }
};

std::vector<size_t> test_counts() {
    const size_t n = static_cast<size_t>(world_size());
    std::vector<size_t> c = {0, 1, n - 1, 7, 13, 10007, (size_t{1} << 20) + 3, 4194301};
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
    return c;
}

struct Variant {
    const char* name;
    std::unique_ptr<Communicator> comm;
};

std::vector<Variant> all_variants() {
    std::vector<Variant> v;
    v.push_back({"mpi", std::make_unique<MpiCommunicator>()});
    v.push_back({"ring default", std::make_unique<RingCommunicator>()});
    // Pure ring with small chunks: many pipeline chunks per segment even at moderate counts.
    v.push_back({"ring only, 16 KB chunks", std::make_unique<RingCommunicator>(RingOptions{0, 16 * 1024, 3, 4000, 0})});
    // Recursive halving + doubling wherever the world is a power of two of at least 4 (the ring elsewhere).
    v.push_back({"halving-doubling", std::make_unique<RingCommunicator>(
                                         RingOptions{0, 1 << 20, 4, 4000, std::numeric_limits<size_t>::max()})});
    // Recursive doubling for every size.
    v.push_back({"recursive doubling", std::make_unique<RingCommunicator>(
                                           RingOptions{std::numeric_limits<size_t>::max(), 1 << 20, 4, 1 << 20})});
    // What sync.backend ring trains with: shared memory (every test rank is on this host) up to 16 MiB at two ranks
    // and for every size from three on, in 256 KiB chunks: 2^20+3 floats take 17 chunks, 4194301 (just under 16 MiB) 65.
    v.push_back({"shared memory", std::make_unique<RingCommunicator>(ring_backend_defaults())});
    // Three floats per chunk: most segments of 0 or 1 elements, thousands of barriers and buffer switches.
    RingOptions tiny = ring_backend_defaults();
    tiny.shared_memory_chunk_bytes = 12;
    v.push_back({"shared memory, 12-byte chunks", std::make_unique<RingCommunicator>(tiny)});
    return v;
}

// Variants whose tiny pieces make large counts slow: correctness at small counts is enough.
bool slow_variant(const std::string& name) { return name.find("-byte") != std::string::npos; }

void check_sum(const char* variant, ReduceOp op, const std::vector<float>& got, const Reference& ref, int n) {
    Mismatch m;
    for (size_t i = 0; i < got.size(); ++i) {
        double want = ref.sum[i], tol = sum_tolerance(ref.sum_abs[i], n);
        if (op == ReduceOp::Average) {
            want /= n;
            tol = tol / n + std::ldexp(std::fabs(want), -23);
        }
        if (!(std::fabs(got[i] - want) <= tol)) m.add(i, got[i], want);
    }
    INFO(variant << " op " << static_cast<int>(op) << " count " << got.size() << ": first bad index " << m.first << " got "
                 << m.got << " want " << m.want);
    CHECK(m.bad == 0);
}

void check_exact(const char* variant, const std::vector<float>& got, const std::vector<float>& want) {
    Mismatch m;
    for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i]) m.add(i, got[i], want[i]);
    INFO(variant << " count " << got.size() << ": first bad index " << m.first << " got " << m.got << " want " << m.want);
    CHECK(m.bad == 0);
}

// Every rank holds bitwise the same result.
bool same_on_all_ranks(Communicator& comm, std::span<const float> v) {
    const std::vector<uint64_t> h = comm.allgather(fnv1a(v));
    return std::all_of(h.begin(), h.end(), [&](uint64_t x) { return x == h[0]; });
}

// What the ring moves on `rank`, derived from the schedule: reduce-scatter step t sends segment r−t and receives
// r−t−1; allgather step a sends r+1−a and receives r−a.
ByteCount expected_ring_bytes(size_t count, int rank, int n) {
    ByteCount b;
    if (n == 1 || count == 0) return b;
    auto seg = [&](int k) {
        k = ((k % n) + n) % n;
        return count / n + (static_cast<size_t>(k) < count % n ? 1 : 0);
    };
    for (int t = 0; t < n - 1; ++t) {
        b.sent += seg(rank - t) * 4;
        b.received += seg(rank - t - 1) * 4;
        b.sent += seg(rank + 1 - t) * 4;
        b.received += seg(rank - t) * 4;
    }
    return b;
}

}  // namespace

TEST_CASE("allreduce matches a serial reference on every backend and path", "[comm][allreduce]") {
    const int n = world_size();
    auto variants = all_variants();
    MpiCommunicator check_comm;
    uint64_t seed = 1;
    for (size_t count : test_counts()) {
        const Reference ref = make_reference(count, seed++);
        std::vector<float> mpi_sum;
        for (auto& v : variants) {
            if (slow_variant(v.name) && count > 2000) continue;
            if (n > 1 && std::string(v.name).rfind("shared memory", 0) == 0) {
                const auto* ring = dynamic_cast<const RingCommunicator*>(v.comm.get());
                REQUIRE(ring);
                CHECK(ring->uses_shared_memory());  // every rank of a ctest job is on this host
            }
            std::vector<float> buf = ref.mine;
            v.comm->allreduce(buf, ReduceOp::Sum);
            check_sum(v.name, ReduceOp::Sum, buf, ref, n);
            if (std::string(v.name) != "mpi") {
                INFO(v.name << " count " << count);
                CHECK(same_on_all_ranks(check_comm, buf));
                // Run to run determinism.
                std::vector<float> again = ref.mine;
                v.comm->allreduce(again, ReduceOp::Sum);
                CHECK(fnv1a(again) == fnv1a(buf));
            }
            if (mpi_sum.empty()) {
                mpi_sum = buf;
            } else {  // ring and mpi agree within float rounding
                Mismatch m;
                for (size_t i = 0; i < count; ++i)
                    if (!(std::fabs(buf[i] - mpi_sum[i]) <= 2 * sum_tolerance(ref.sum_abs[i], n))) m.add(i, buf[i], mpi_sum[i]);
                INFO(v.name << " vs mpi, count " << count << " first bad " << m.first);
                CHECK(m.bad == 0);
            }

            if (count > (1u << 21) && std::string(v.name) == "ring only, 16 KB chunks") continue;  // keep it quick
            buf = ref.mine;
            v.comm->allreduce(buf, ReduceOp::Average);
            check_sum(v.name, ReduceOp::Average, buf, ref, n);
            buf = ref.mine;
            v.comm->allreduce(buf, ReduceOp::Max);
            check_exact(v.name, buf, ref.max);
            buf = ref.mine;
            v.comm->allreduce(buf, ReduceOp::Min);
            check_exact(v.name, buf, ref.min);
        }
    }
}

TEST_CASE("ring pipeline with tiny chunks and shallow depth; recursive doubling in tiny pieces", "[comm][allreduce]") {
    const int n = world_size();
    for (int depth : {1, 2, 5, 0}) {
        // Two floats per chunk; depth 0 stands for recursive doubling in pieces of three floats.
        RingCommunicator ring(depth > 0 ? RingOptions{0, 8, depth, 4000, 0}
                                        : RingOptions{std::numeric_limits<size_t>::max(), 8, 1, 12});
        for (size_t count : {size_t{1}, size_t(n + 1), size_t{13}, size_t{101}, size_t{1009}}) {
            const Reference ref = make_reference(count, 100 + count);
            std::vector<float> buf = ref.mine;
            ring.allreduce(buf, ReduceOp::Sum);
            INFO("depth " << depth);
            check_sum("ring tiny chunks", ReduceOp::Sum, buf, ref, n);
            buf = ref.mine;
            ring.allreduce(buf, ReduceOp::Max);
            check_exact("ring tiny chunks max", buf, ref.max);
        }
    }
}

TEST_CASE("ring byte counters are exact", "[comm][bytes]") {
    const int n = world_size(), me = world_rank();
    RingCommunicator ring(RingOptions{0, 4096, 4, 4000, 0});
    MpiCommunicator mpi;
    for (size_t count : {size_t{0}, size_t{1}, size_t(n + 2), size_t{10007}, size_t{65536 + 3}}) {
        std::vector<float> buf = rank_data(count, me, 7);
        const uint64_t s0 = ring.bytes_sent(), r0 = ring.bytes_received();
        ring.allreduce(buf, ReduceOp::Sum);
        const ByteCount want = expected_ring_bytes(count, me, n);
        INFO("count " << count);
        CHECK(ring.bytes_sent() - s0 == want.sent);
        CHECK(ring.bytes_received() - r0 == want.received);
        CHECK(ring_allreduce_bytes(count, 4, me, n).sent == want.sent);
        CHECK(ring_allreduce_bytes(count, 4, me, n).received == want.received);
        if (n > 1 && count > 0 && count % n == 0) CHECK(want.sent == 2 * (n - 1) * (count / n) * 4);
        // The MPI backend reports the same (estimated) volume.
        const uint64_t m0 = mpi.bytes_sent(), mr0 = mpi.bytes_received();
        buf = rank_data(count, me, 7);
        mpi.allreduce(buf, ReduceOp::Sum);
        CHECK(mpi.bytes_sent() - m0 == want.sent);
        CHECK(mpi.bytes_received() - mr0 == want.received);
    }

    // Recursive doubling: log2(P) full exchanges, plus the fold of the 2(N−P) lowest ranks.
    RingCommunicator rd(RingOptions{std::numeric_limits<size_t>::max(), 4096, 4});
    const size_t count = 1000;
    int P = 1, levels = 0;
    while (P * 2 <= n) P *= 2, ++levels;
    const int extra = n - P;
    uint64_t want_sent = 0, want_recv = 0;
    if (me < 2 * extra) {
        want_sent = want_recv = (me % 2 == 0) ? count * 4 : (levels + 1) * count * 4;
    } else {
        want_sent = want_recv = levels * count * 4;
    }
    std::vector<float> buf = rank_data(count, me, 9);
    rd.allreduce(buf, ReduceOp::Sum);
    CHECK(rd.bytes_sent() == want_sent);
    CHECK(rd.bytes_received() == want_recv);

    // Recursive halving + doubling moves the ring's volume in log2(N) steps each way: 2(N−1)/N of the data each way
    // when N divides the count.
    if (n >= 4 && (n & (n - 1)) == 0) {
        RingCommunicator hd(RingOptions{0, 4096, 4, 4000, std::numeric_limits<size_t>::max()});
        const size_t c = 1024 * static_cast<size_t>(n);
        std::vector<float> data = rank_data(c, me, 11);
        hd.allreduce(data, ReduceOp::Sum);
        CHECK(hd.bytes_sent() == 2 * (n - 1) * (c / n) * 4);
        CHECK(hd.bytes_received() == 2 * (n - 1) * (c / n) * 4);
    }
}

TEST_CASE("shared-memory byte counters: what peers read from our slot, and we from theirs", "[comm][bytes][shm]") {
    const int n = world_size(), me = world_rank();
    RingOptions o = ring_backend_defaults();
    o.shared_memory_chunk_bytes = 4096;  // 1024 floats per chunk
    RingCommunicator shm(o);
    if (n > 1) REQUIRE(shm.uses_shared_memory());
    const size_t N = static_cast<size_t>(n), r = static_cast<size_t>(me);
    for (size_t count : {size_t{0}, size_t{1}, size_t(n - 1), size_t{1024}, size_t{1024 * 3 + 7}, size_t{10007}}) {
        uint64_t want = 0;
        if (n > 1) {
            for (size_t off = 0; off < count; off += 1024) {
                const size_t len = std::min<size_t>(1024, count - off);
                const size_t mine = len / N + (r < len % N ? 1 : 0);
                want += ((len - mine) + (N - 1) * mine) * 4;
            }
        }
        std::vector<float> buf = rank_data(count, me, 13);
        const uint64_t s0 = shm.bytes_sent(), r0 = shm.bytes_received();
        shm.allreduce(buf, ReduceOp::Sum);
        INFO("count " << count);
        CHECK(shm.bytes_sent() - s0 == want);
        CHECK(shm.bytes_received() - r0 == want);
        // When N divides every chunk this is exactly the ring's 2(N-1)/N of the data.
        if (count == 1024 && 1024 % N == 0) CHECK(want == ring_allreduce_bytes(count, 4, me, n).sent);
    }
}

TEST_CASE("a shared-memory segment that cannot be made falls back to MPI point-to-point on every rank",
          "[comm][allreduce][shm]") {
    const int n = world_size();
    RingOptions o = ring_backend_defaults();
    o.shared_memory_chunk_bytes = size_t{1} << 40;  // refused before anything is allocated
    RingCommunicator ring(o);
    CHECK_FALSE(ring.uses_shared_memory());
    std::string why;
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    CHECK(SharedMemoryAllreduce::create(dup, size_t{1} << 40, &why) == nullptr);
    MPI_Comm_free(&dup);
    CHECK_THAT(why, Catch::Contains("larger than"));
    const Reference ref = make_reference(10007, 77);
    std::vector<float> buf = ref.mine;
    ring.allreduce(buf, ReduceOp::Sum);
    check_sum("fallback", ReduceOp::Sum, buf, ref, n);
    // RINGTRAIN_SHARED_MEMORY=0 turns the path off for the ring backend's defaults.
    setenv("RINGTRAIN_SHARED_MEMORY", "0", 1);
    CHECK(ring_backend_defaults().shared_memory_max_bytes == 0);
    unsetenv("RINGTRAIN_SHARED_MEMORY");
    CHECK(ring_backend_defaults().shared_memory_max_bytes > 0);
}

TEST_CASE("broadcast from the first and the last rank", "[comm][broadcast]") {
    const int n = world_size(), me = world_rank();
    for (const char* backend : {"mpi", "ring"}) {
        auto comm = make_communicator(backend);
        for (int root : {0, n - 1}) {
            for (size_t count : {size_t{0}, size_t{1}, size_t{10007}, size_t{1} << 20}) {
                const std::vector<float> want = rank_data(count, root, 31);
                std::vector<float> buf = me == root ? want : std::vector<float>(count, -7.0f);
                comm->broadcast(buf, root);
                INFO(backend << " root " << root << " count " << count);
                check_exact("broadcast", buf, want);
            }
            std::vector<std::byte> bytes(1001);
            for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(me == root ? (i * 7 + root) & 0xff : 0);
            comm->broadcast_bytes(bytes, root);
            size_t bad = 0;
            for (size_t i = 0; i < bytes.size(); ++i) bad += bytes[i] != std::byte((i * 7 + root) & 0xff);
            CHECK(bad == 0);
        }
        std::vector<float> one(3);
        CHECK_THROWS_AS(comm->broadcast(one, n), Error);
    }
}

TEST_CASE("allgather with a different count on every rank", "[comm][allgather]") {
    const int n = world_size(), me = world_rank();
    auto count_of = [](int k) { return k % 3 == 0 ? size_t{0} : size_t(k * 1000 + 1); };
    for (const char* backend : {"mpi", "ring"}) {
        auto comm = make_communicator(backend);
        const std::vector<float> mine = rank_data(count_of(me), me, 55);
        const std::vector<float> got = comm->allgather(mine);
        std::vector<float> want;
        for (int k = 0; k < n; ++k) {
            const auto v = rank_data(count_of(k), k, 55);
            want.insert(want.end(), v.begin(), v.end());
        }
        REQUIRE(got.size() == want.size());
        check_exact("allgather", got, want);

        // Everyone contributes nothing.
        CHECK(comm->allgather(std::span<const float>{}).empty());

        const std::vector<uint64_t> ids = comm->allgather(uint64_t(1000 + me * me));
        REQUIRE(ids.size() == size_t(n));
        for (int k = 0; k < n; ++k) CHECK(ids[k] == uint64_t(1000 + k * k));
        comm->barrier();
    }
}

TEST_CASE("broadcast_object and allgather_object move plain structs; unequal byte counts are an error on every rank",
          "[comm][allgather][broadcast]") {
    const int n = world_size(), me = world_rank();
    struct Position {  // an awkward size (not a multiple of 8) with mixed member types
        int64_t epoch;
        double loss;
        uint32_t flags;
        char tag[5];
    };
    for (const char* backend : {"mpi", "ring"}) {
        auto comm = make_communicator(backend);
        for (int root = 0; root < n; ++root) {
            Position p{me == root ? int64_t{1} << 40 : -1, me == root ? 0.125 * root : 9.0, 7u * me, {}};
            std::snprintf(p.tag, sizeof p.tag, "r%d", me);
            comm->broadcast_object(p, root);
            CHECK(p.epoch == int64_t{1} << 40);
            CHECK(p.loss == 0.125 * root);
            CHECK(p.flags == 7u * root);
            // The tag as the sender wrote it (snprintf: GCC 12 misreports -Wrestrict on "r" + std::to_string).
            char expect[16];
            std::snprintf(expect, sizeof expect, "r%d", root);
            CHECK(std::string(p.tag) == expect);
        }
        Position mine{me * 3, -0.5 * me, static_cast<uint32_t>(me), {}};
        std::snprintf(mine.tag, sizeof mine.tag, "x%d", me);
        const std::vector<Position> all = comm->allgather_object(mine);
        REQUIRE(all.size() == size_t(n));
        for (int k = 0; k < n; ++k) {
            CHECK(all[k].epoch == k * 3);
            CHECK(all[k].loss == -0.5 * k);
            CHECK(all[k].flags == uint32_t(k));
            char expect[16];
            std::snprintf(expect, sizeof expect, "x%d", k);
            CHECK(std::string(all[k].tag) == expect);
        }
        // Zero bytes from everyone: an empty result, no MPI call with a null buffer.
        CHECK(comm->allgather_bytes({}).empty());
        if (n > 1) {
            // Rank 1 passes one byte more: every rank must get the error (none may wait in a later collective).
            std::vector<std::byte> bytes(me == 1 ? 4 : 3, std::byte{1});
            CHECK_THROWS_AS(comm->allgather_bytes(bytes), Error);
        }
        comm->barrier();
    }
}

TEST_CASE("double allreduce for metrics", "[comm][allreduce]") {
    const int n = world_size(), me = world_rank();
    for (const char* backend : {"mpi", "ring"}) {
        auto comm = make_communicator(backend);
        std::vector<double> v = {double(me), 1.0, 0.25 * me};
        comm->allreduce(std::span<double>(v), ReduceOp::Sum);
        CHECK(v[0] == Approx(n * (n - 1) / 2.0));
        CHECK(v[1] == n);
        std::vector<double> a = {double(me)};
        comm->allreduce(std::span<double>(a), ReduceOp::Average);
        CHECK(a[0] == Approx((n - 1) / 2.0));
        std::vector<double> mx = {double(me)}, mn = {double(me)};
        comm->allreduce(std::span<double>(mx), ReduceOp::Max);
        comm->allreduce(std::span<double>(mn), ReduceOp::Min);
        CHECK(mx[0] == n - 1);
        CHECK(mn[0] == 0);
    }
}

TEST_CASE("rank, size and local placement come from MPI", "[comm][env]") {
    const int n = world_size(), me = world_rank();
    for (const char* backend : {"mpi", "ring"}) {
        auto comm = make_communicator(backend);
        CHECK(comm->backend() == backend);
        CHECK(comm->rank() == me);
        CHECK(comm->size() == n);
        // The tests run on one host.
        CHECK(comm->local_size() == n);
        CHECK(comm->local_rank() == me);
    }
    const LaunchEnvironment le = describe_launch_environment();
    CHECK(le.world_size == n);
    CHECK(le.node_count == 1);
    REQUIRE(le.ranks.size() == size_t(n));
    for (int k = 0; k < n; ++k) {
        CHECK(le.ranks[k].rank == k);
        CHECK(le.ranks[k].local_rank == k);
        CHECK(le.ranks[k].local_size == n);
        CHECK(le.ranks[k].hostname == le.ranks[0].hostname);
        CHECK_FALSE(le.ranks[k].hostname.empty());
    }
    CHECK(le.launcher == "open-mpi");  // the tests are started by Open MPI's mpirun
    const bool has_rank_var = std::any_of(le.variables.begin(), le.variables.end(), [&](const auto& p) {
        return p.first == "OMPI_COMM_WORLD_RANK" && p.second == std::to_string(me);
    });
    CHECK(has_rank_var);
#ifdef RINGTRAIN_WITH_CUDA
    CHECK(communicator_backends() == std::vector<std::string>{"ring", "mpi", "nccl"});
#else
    CHECK(communicator_backends() == std::vector<std::string>{"ring", "mpi"});
#endif
}

TEST_CASE("make_communicator names its backends", "[comm][factory]") {
    CHECK(make_communicator("ring")->backend() == "ring");
    CHECK(make_communicator("mpi")->backend() == "mpi");
#ifndef RINGTRAIN_WITH_CUDA
    try {
        make_communicator("nccl");
        FAIL("nccl should be refused in a CPU build");
    } catch (const CollectiveInputError& e) {  // on every rank alike: cli exits without MPI_Abort
        CHECK_THAT(std::string(e.what()), Catch::Contains("nccl needs a CUDA build"));
    }
#else
    if (cuda_device_count() == 0) {
        // A CUDA build on a machine without a GPU: a clear error, not a crash.
        CHECK_THROWS_AS(make_communicator("nccl"), CollectiveError);  // agreed: every rank throws it
    }
#endif
    try {
        make_communicator("gloo");
        FAIL("unknown backend accepted");
    } catch (const InputError& e) {
        const std::string msg = e.what();
        CHECK(msg.find("gloo") != std::string::npos);
        CHECK(msg.find("ring") != std::string::npos);
        CHECK(msg.find("mpi") != std::string::npos);
    }
}

TEST_CASE("MpiRuntime does not own an MPI that is already initialised", "[comm][runtime]") {
    int argc = 0;
    char** argv = nullptr;
    {
        MpiRuntime rt(&argc, &argv);
        CHECK_FALSE(rt.owns_mpi());
        CHECK(rt.world_rank() == world_rank());
        CHECK(rt.world_size() == world_size());
        int provided = 0;
        MPI_Query_thread(&provided);
        CHECK(rt.thread_level() == provided);
    }
    int finalized = 1;
    MPI_Finalized(&finalized);
    CHECK(finalized == 0);  // still usable
    CHECK_THROWS_WITH(check_mpi(MPI_ERR_COUNT, "MPI_Isend"), Catch::Contains("MPI_Isend failed"));
    CHECK_NOTHROW(check_mpi(MPI_SUCCESS, "MPI_Isend"));
    CHECK(std::string(thread_level_name(MPI_THREAD_MULTIPLE)) == "MPI_THREAD_MULTIPLE");
}

TEST_CASE("concurrent allreduces on two communicators do not mix", "[comm][threads]") {
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
        WARN("MPI did not grant MPI_THREAD_MULTIPLE; skipping");
        return;
    }
    const int n = world_size();
    RingCommunicator a(RingOptions{0, 4096, 4, 4000, 0}), b(RingOptions{0, 4096, 4, 4000, 0});
    const Reference ra = make_reference(30011, 901), rb = make_reference(20011, 902);
    auto run = [](RingCommunicator& c, const Reference& ref, std::vector<float>& out) {
        for (int it = 0; it < 5; ++it) {
            out = ref.mine;
            c.allreduce(out, ReduceOp::Sum);
        }
    };
    // Five allreduces on each of the two communicators, from two threads at once.
    auto run_pair = [&](RingCommunicator& first, RingCommunicator& second, const std::string& label) {
        std::vector<float> out_a, out_b;
        std::thread ta(run, std::ref(first), std::cref(ra), std::ref(out_a));
        std::thread tb(run, std::ref(second), std::cref(rb), std::ref(out_b));
        ta.join();
        tb.join();
        check_sum((label + "thread a").c_str(), ReduceOp::Sum, out_a, ra, n);
        check_sum((label + "thread b").c_str(), ReduceOp::Sum, out_b, rb, n);
    };
    run_pair(a, b, "");
    // The same with two shared-memory communicators: each has its own segment and barrier counters.
    RingOptions o = ring_backend_defaults();
    o.shared_memory_chunk_bytes = 4096;
    RingCommunicator sa(o), sb(o);
    run_pair(sa, sb, "shared memory, ");
}

namespace {

// An allgatherv case: rank r sends count_of(r) floats (rank 1 none), value(r, i) at position i.
struct GathervCase {
    std::vector<size_t> counts;
    size_t total = 0;
    std::vector<float> mine;
    float (*value)(int, size_t);
    // out holds every rank's part, in rank order.
    void require_gathered(const std::vector<float>& out) const {
        size_t at = 0;
        for (size_t r = 0; r < counts.size(); ++r)
            for (size_t i = 0; i < counts[r]; ++i) REQUIRE(out[at++] == value(static_cast<int>(r), i));
    }
};

GathervCase gatherv_case(size_t (*count_of)(int), float (*value)(int, size_t)) {
    const int n = world_size(), me = world_rank();
    GathervCase c;
    c.value = value;
    for (int r = 0; r < n; ++r) {
        c.counts.push_back(r == 1 ? 0 : count_of(r));  // rank 1 sends nothing
        c.total += c.counts.back();
    }
    c.mine.resize(c.counts[static_cast<size_t>(me)]);
    for (size_t i = 0; i < c.mine.size(); ++i) c.mine[i] = value(me, i);
    return c;
}

}  // namespace

TEST_CASE("allgatherv_into: counts known on every rank, a rank with none, into the caller's buffer", "[comm][allgather]") {
    for (const char* backend : {"ring", "mpi"}) {
        INFO(backend);
        auto comm = ringtrain::comm::make_communicator(backend);
        const GathervCase c = gatherv_case([](int r) { return static_cast<size_t>(3 + 2 * r); },
                                           [](int r, size_t i) { return static_cast<float>(100 * r + i); });
        const std::vector<size_t>& counts = c.counts;
        const std::vector<float>& mine = c.mine;
        const size_t total = c.total;
        std::vector<float> out(total, -1.0f);
        for (int repeat = 0; repeat < 2; ++repeat) {  // the same buffer again: nothing left over
            comm->allgatherv_into(mine, counts, out);
            c.require_gathered(out);
            // The same as allgather.
            CHECK(comm->allgather(std::span<const float>(mine)) == out);
        }
        // Counts that do not match what this rank passes are refused on the rank that sees it, before sending.
        std::vector<float> wrong(total + 1);
        CHECK_THROWS_AS(comm->allgatherv_into(mine, counts, wrong), ringtrain::Error);
    }
}

TEST_CASE("allgatherv_into_while: the same result, and the early ranks work while a late one has not arrived",
          "[comm][allgather]") {
    const int n = world_size(), me = world_rank();
    for (const char* backend : {"ring", "mpi"}) {
        INFO(backend);
        auto comm = ringtrain::comm::make_communicator(backend);
        const GathervCase c = gatherv_case([](int r) { return static_cast<size_t>(5000 + 3 * r); },  // past eager
                                           [](int r, size_t i) { return static_cast<float>(7 * r + i % 1000); });
        const std::vector<size_t>& counts = c.counts;
        const std::vector<float>& mine = c.mine;
        const size_t total = c.total;
        for (const int pieces : {0, 3, 1 << 30}) {  // idle work runs out at once, after 3 pieces, never
            std::vector<float> out(total, -1.0f);
            int calls = 0;
            // The last rank arrives 30 ms late: the others' idle work runs meanwhile (while it has any).
            if (me == n - 1 && n > 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
            comm->allgatherv_into_while(mine, counts, out, [&] { return ++calls <= pieces; });
            c.require_gathered(out);
            if (n > 1 && me != n - 1) {
                CHECK(calls >= std::min(pieces, 3) + 1);  // called until it said no (or the collective completed)
                if (pieces == 0) CHECK(calls == 1);       // then it blocked, not polled
            }
        }
        // Without idle work it is the blocking collective.
        std::vector<float> out(total);
        comm->allgatherv_into_while(mine, counts, out, {});
        CHECK(comm->allgather(std::span<const float>(mine)) == out);
    }
}

TEST_CASE("ring on one host: allgatherv and small double reductions through shared memory, in rounds of a slot, "
          "interleaved with allreduce", "[comm][allgather][shm]") {
    const int n = world_size(), me = world_rank();
    RingOptions o = ring_backend_defaults();
    o.shared_memory_chunk_bytes = 4096;  // 1024 floats a slot: parts of 0, 1, 1023, 1024, 1025 and 3077 floats
    RingCommunicator ring(o);
    if (n > 1) REQUIRE(ring.uses_shared_memory());
    const size_t N = static_cast<size_t>(n), r_me = static_cast<size_t>(me);
    // Count patterns: each rank's part by rank; rank 1 always sends nothing (as a rank whose batch touched no row).
    const std::vector<std::vector<size_t>> patterns = {{1, 0, 1023, 1024}, {1025, 0, 3077, 1}, {3077, 0, 1024, 2048}};
    for (int round = 0; round < 3; ++round) {
        for (const std::vector<size_t>& pattern : patterns) {
            std::vector<size_t> counts(N);
            size_t total = 0;
            for (size_t r = 0; r < N; ++r) total += counts[r] = r == 1 ? 0 : pattern[r % pattern.size()];
            INFO("round " << round << ", rank 0's part " << counts[0]);
            const uint64_t seed = 100 + static_cast<uint64_t>(round);
            std::vector<float> mine = rank_data(counts[r_me], me, seed), out(total, -7.0f);
            const uint64_t s0 = ring.bytes_sent(), r0 = ring.bytes_received();
            ring.allgatherv_into(mine, counts, out);
            // Exactly every rank's part in rank order (bit for bit: nothing is computed on the way).
            size_t at = 0, bad = 0;
            for (size_t r = 0; r < N; ++r) {
                const std::vector<float> want = rank_data(counts[r], static_cast<int>(r), seed);
                for (size_t i = 0; i < counts[r]; ++i) bad += std::memcmp(&out[at++], &want[i], sizeof(float)) != 0;
            }
            CHECK(bad == 0);
            // What peers read from our slot, and what we read from theirs.
            CHECK(ring.bytes_sent() - s0 == (N - 1) * counts[r_me] * sizeof(float));
            CHECK(ring.bytes_received() - r0 == (total - counts[r_me]) * sizeof(float));

            // An allreduce between gathers (two barriers a chunk, the same two buffers): still the exact sums.
            const size_t count = 2500;  // three chunks
            const Reference ref = make_reference(count, seed + 7);
            std::vector<float> buf = ref.mine;
            ring.allreduce(buf, ReduceOp::Sum);
            check_sum("shared memory between gathers", ReduceOp::Sum, buf, ref, n);

            // Small double reductions: the serial result, and the same bits on every rank (combined in rank order).
            for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Max, ReduceOp::Min}) {
                auto value = [&](int r, int i) { return 0.1 * (r + 1) + 1e-9 * i - 0.37 * (i % 3) * (r % 2); };
                std::vector<double> v(5);
                for (int i = 0; i < 5; ++i) v[static_cast<size_t>(i)] = value(me, i);
                ring.allreduce_while(v, op, {});
                for (int i = 0; i < 5; ++i) {
                    double want = value(0, i);
                    for (int r = 1; r < n; ++r) {
                        const double x = value(r, i);
                        want = op == ReduceOp::Max ? std::max(want, x) : op == ReduceOp::Min ? std::min(want, x) : want + x;
                    }
                    if (op == ReduceOp::Average) want /= n;
                    CHECK(v[static_cast<size_t>(i)] == Approx(want).epsilon(1e-14));
                }
                const std::vector<std::byte> all = ring.allgather_bytes(std::as_bytes(std::span<const double>(v)));
                for (int r = 0; r < n; ++r)
                    CHECK(std::memcmp(all.data() + static_cast<size_t>(r) * 5 * sizeof(double), v.data(),
                                      5 * sizeof(double)) == 0);
            }
        }
    }
}

TEST_CASE("ring on one host: idle work that throws leaves the shared-memory collectives usable and names no late peer",
          "[comm][allgather][shm]") {
    const int n = world_size(), me = world_rank();
    if (n < 2) return;  // one rank: no wait, no idle work
    RingCommunicator ring(ring_backend_defaults());
    REQUIRE(ring.uses_shared_memory());
    const GathervCase c = gatherv_case([](int r) { return static_cast<size_t>(40 + r); },
                                       [](int r, size_t i) { return static_cast<float>(3 * r + i); });
    std::vector<float> out(c.total);
    // The last rank arrives late; rank 0's idle work fails (a malformed line while parsing ahead, say).
    if (me == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    bool threw = false;
    try {
        ring.allgatherv_into_while(c.mine, c.counts, out, [&]() -> bool {
            if (me == 0) throw std::runtime_error("bad line while parsing ahead");
            return false;
        });
    } catch (const std::runtime_error&) {
        threw = true;
    }
    if (me == 0) CHECK(threw);
    if (me != 0) c.require_gathered(out);  // the others were not held up by rank 0 leaving early
    CHECK(ring.waiting_for().empty());
    // Every rank can go on: the next gathers and a reduction give the right results.
    for (int k = 0; k < 3; ++k) {
        std::fill(out.begin(), out.end(), -1.0f);
        ring.allgatherv_into_while(c.mine, c.counts, out, [] { return false; });
        c.require_gathered(out);
    }
    std::vector<double> one{1.0};
    ring.allreduce_while(one, ReduceOp::Sum, {});
    CHECK(one[0] == n);
}

TEST_CASE("gather: every rank's part on the root only, counts differing, root first or last", "[comm][gather]") {
    const int n = world_size(), me = world_rank();
    auto count_of = [](int k) { return k % 3 == 1 ? size_t{0} : size_t(k * 100 + 5); };  // rank 1 sends nothing
    std::vector<float> want;
    for (int k = 0; k < n; ++k) {
        const auto v = rank_data(count_of(k), k, 77);
        want.insert(want.end(), v.begin(), v.end());
    }
    for (const char* backend : {"mpi", "ring"}) {
        INFO(backend);
        auto comm = make_communicator(backend);
        const std::vector<float> mine = rank_data(count_of(me), me, 77);
        for (const int root : {0, n - 1}) {
            const uint64_t sent0 = comm->bytes_sent(), received0 = comm->bytes_received();
            const std::vector<float> got = comm->gather(mine, root);
            if (me == root) {
                REQUIRE(got.size() == want.size());
                check_exact("gather", got, want);
                CHECK(comm->bytes_received() - received0 == (want.size() - mine.size()) * sizeof(float));
            } else {
                CHECK(got.empty());
                CHECK(comm->bytes_sent() - sent0 == mine.size() * sizeof(float));
                CHECK(comm->bytes_received() == received0);  // what allgather would have sent every rank
            }
        }
        CHECK(comm->gather(std::span<const float>{}, 0).empty());
        comm->barrier();
    }
}

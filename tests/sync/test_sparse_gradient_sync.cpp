// SparseGradientSync under mpirun at 1–4 ranks: both ways (allgather + merge, dense allreduce) and auto against a
// serial reference that every rank computes from every rank's seeded gradient; duplicate rows across ranks, ranks
// without rows, the byte arithmetic of choose() and the stats.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <bit>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "comm/serial_reference.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/sync/sparse_gradient_sync.hpp"

using namespace ringtrain;
using rt_test::world_rank;
using rt_test::world_size;
using sync::SparseGradientSync;
using sync::SparseSyncMethod;

namespace {

// Rank `rank`'s gradient: each row touched with probability `density` (never when the rank is `empty_rank`), values
// in [-1, 1]; the dense part likewise.
struct RankGrad {
    SparseRows rows;
    std::vector<float> dense;
};

RankGrad make_grad(int rank, int64_t num_rows, int64_t width, size_t dense_count, float density, uint64_t seed,
                   int empty_rank = -1) {
    Rng rng(seed * 7919u + static_cast<uint64_t>(rank) * 104729u + 3u);
    RankGrad g;
    g.rows.width = width;
    for (int64_t r = 0; r < num_rows; ++r) {
        if (rng.uniform() >= density || rank == empty_rank) continue;
        g.rows.rows.push_back(static_cast<uint32_t>(r));
        for (int64_t k = 0; k < width; ++k) g.rows.values.push_back(rng.uniform(-1.0f, 1.0f));
    }
    for (size_t j = 0; j < dense_count; ++j) g.dense.push_back(rng.uniform(-1.0f, 1.0f));
    return g;
}

// The exact average (double) of every rank's gradient: union of rows -> mean row.
struct Reference {
    std::map<uint32_t, std::vector<double>> rows;
    std::vector<double> dense;
};

Reference reference(int64_t num_rows, int64_t width, size_t dense_count, float density, uint64_t seed, int empty_rank = -1) {
    const int n = world_size();
    Reference ref;
    ref.dense.assign(dense_count, 0.0);
    for (int r = 0; r < n; ++r) {
        const RankGrad g = make_grad(r, num_rows, width, dense_count, density, seed, empty_rank);
        for (int64_t i = 0; i < g.rows.count(); ++i) {
            auto& row = ref.rows[g.rows.rows[static_cast<size_t>(i)]];
            row.resize(static_cast<size_t>(width), 0.0);
            for (int64_t k = 0; k < width; ++k) row[static_cast<size_t>(k)] += g.rows.row(i)[static_cast<size_t>(k)] / n;
        }
        for (size_t j = 0; j < dense_count; ++j) ref.dense[j] += static_cast<double>(g.dense[j]) / n;
    }
    return ref;
}

void check_against(const Reference& ref, const SparseRows& got, std::span<const float> dense) {
    REQUIRE(got.count() == static_cast<int64_t>(ref.rows.size()));
    REQUIRE(got.values.size() == got.rows.size() * static_cast<size_t>(got.width));
    int64_t i = 0;
    for (const auto& [id, row] : ref.rows) {
        REQUIRE(got.rows[static_cast<size_t>(i)] == id);
        for (size_t k = 0; k < row.size(); ++k) REQUIRE(got.row(i)[k] == Approx(row[k]).margin(1e-6));
        ++i;
    }
    REQUIRE(dense.size() == ref.dense.size());
    for (size_t j = 0; j < dense.size(); ++j) REQUIRE(dense[j] == Approx(ref.dense[j]).margin(1e-6));
}

// Every rank holds the same bits (the merge order and the allreduce are rank-independent).
bool same_on_every_rank(comm::Communicator& comm, const SparseRows& g, std::span<const float> dense) {
    uint64_t h = fnv1a(g.rows.data(), g.rows.size() * sizeof(uint32_t));
    h = fnv1a(g.values.data(), g.values.size() * sizeof(float), h);
    h = fnv1a(dense.data(), dense.size() * sizeof(float), h);
    for (uint64_t other : comm.allgather(h))
        if (other != h) return false;
    return true;
}

const char* method_name(SparseSyncMethod m) {
    return m == SparseSyncMethod::Auto ? "auto" : m == SparseSyncMethod::Allgather ? "allgather" : "dense";
}

}  // namespace

TEST_CASE("choose: the byte arithmetic in the header", "[sparse_sync]") {
    // N = 4, rows {10, 0, 5, 1}, R = 1000, w = 1: A = 3/4 * 16 * 8 = 96; b = 3 bits, 8 counts per float, so
    // D = 2 * 3/4 * 4 * (1000 + 125) = 6750.
    const std::vector<int64_t> few{10, 0, 5, 1};
    auto c = SparseGradientSync::choose(SparseSyncMethod::Auto, few, 1000, 1);
    CHECK(c.allgather_bytes == 96);
    CHECK(c.dense_bytes == 6750);
    CHECK(c.method == SparseSyncMethod::Allgather);
    // Every rank touching 300 rows of width 3: A = 3/4 * 1200 * 16 = 14400 <= D = 6 * (3000 + 125) = 18750, so
    // allgather; at 400 rows each A = 3/4 * 1600 * 16 = 19200 > 18750, so dense.
    const std::vector<int64_t> r300(4, 300), r400(4, 400);
    c = SparseGradientSync::choose(SparseSyncMethod::Auto, r300, 1000, 3);
    CHECK(c.allgather_bytes == 14400);
    CHECK(c.dense_bytes == 18750);
    CHECK(c.method == SparseSyncMethod::Allgather);
    c = SparseGradientSync::choose(SparseSyncMethod::Auto, r400, 1000, 3);
    CHECK(c.allgather_bytes == 19200);
    CHECK(c.method == SparseSyncMethod::Dense);
    // Forced methods keep the arithmetic but not the choice; one rank moves nothing and gathers.
    CHECK(SparseGradientSync::choose(SparseSyncMethod::Allgather, r400, 1000, 3).method == SparseSyncMethod::Allgather);
    CHECK(SparseGradientSync::choose(SparseSyncMethod::Dense, few, 1000, 1).method == SparseSyncMethod::Dense);
    const std::vector<int64_t> one{1000};
    c = SparseGradientSync::choose(SparseSyncMethod::Auto, one, 1000, 1);
    CHECK((c.allgather_bytes == 0 && c.dense_bytes == 0 && c.method == SparseSyncMethod::Allgather));
    // N = 2: b = 2 bits, 12 counts per float: D = 2 * 1/2 * 4 * (13 + 2) = 60.
    const std::vector<int64_t> two{1, 2};
    c = SparseGradientSync::choose(SparseSyncMethod::Auto, two, 13, 1);
    CHECK(c.dense_bytes == 60);
    CHECK(c.allgather_bytes == 12);
}

TEST_CASE("allgather, dense and auto equal the serial reference", "[sparse_sync]") {
    struct Case {
        int64_t rows, width;
        size_t dense;
        float density;
    };
    // Awkward sizes: one row, sizes off the marker packing (7, 4099), wide rows, dense parts of 0, 1 and 3.
    const std::vector<Case> cases{{1, 1, 1, 0.7f}, {7, 3, 3, 0.5f}, {4099, 1, 1, 0.01f}, {4099, 2, 0, 0.6f},
                                  {1000, 5, 2, 0.1f}};
    for (const char* backend : {"ring", "mpi"}) {
        auto comm = comm::make_communicator(backend);
        uint64_t seed = 11;
        for (const Case& c : cases) {
            for (auto method : {SparseSyncMethod::Allgather, SparseSyncMethod::Dense, SparseSyncMethod::Auto}) {
                INFO(backend << " " << method_name(method) << " rows " << c.rows << " width " << c.width);
                SparseGradientSync sync(*comm, c.rows, c.width, method);
                for (int step = 0; step < 3; ++step) {  // reused buffers must come back clean
                    ++seed;
                    RankGrad g = make_grad(world_rank(), c.rows, c.width, c.dense, c.density, seed);
                    sync.average(g.rows, g.dense);
                    check_against(reference(c.rows, c.width, c.dense, c.density, seed), g.rows, g.dense);
                    CHECK(same_on_every_rank(*comm, g.rows, g.dense));
                }
                const auto& st = sync.stats();
                CHECK(st.allgather_steps + st.dense_steps == 3);
                if (method == SparseSyncMethod::Allgather) CHECK(st.dense_steps == 0);
                if (method == SparseSyncMethod::Dense) CHECK(st.allgather_steps == 0);
            }
        }
    }
}

TEST_CASE("rows touched by several ranks are merged into one", "[sparse_sync]") {
    auto comm = comm::make_communicator("ring");
    const int n = world_size(), me = world_rank();
    for (auto method : {SparseSyncMethod::Allgather, SparseSyncMethod::Dense}) {
        INFO(method_name(method));
        SparseGradientSync sync(*comm, 10, 2, method);
        // Every rank touches rows 2 and 9 (values rank+1 and -(rank+1)) and rank r alone row r % 10.
        SparseRows g;
        g.width = 2;
        const auto own = static_cast<uint32_t>(me % 10);
        std::map<uint32_t, std::vector<float>> rows{{2, {float(me + 1), 1.0f}}, {9, {-float(me + 1), 0.5f}}};
        rows[own] = {0.25f, float(me)};  // replaces row 2 or 9's own values where they coincide (me = 2, 9)
        for (auto& [id, v] : rows) {
            g.rows.push_back(id);
            g.values.insert(g.values.end(), v.begin(), v.end());
        }
        std::vector<float> bias{float(me)};
        sync.average(g, bias);
        // Reference: what every rank put in.
        std::map<uint32_t, std::vector<double>> want;
        for (int r = 0; r < n; ++r) {
            std::map<uint32_t, std::vector<float>> theirs{{2, {float(r + 1), 1.0f}}, {9, {-float(r + 1), 0.5f}}};
            theirs[static_cast<uint32_t>(r % 10)] = {0.25f, float(r)};
            for (auto& [id, v] : theirs) {
                auto& w = want[id];
                w.resize(2, 0.0);
                for (size_t k = 0; k < 2; ++k) w[k] += v[k] / double(n);
            }
        }
        REQUIRE(g.count() == static_cast<int64_t>(want.size()));
        int64_t i = 0;
        for (auto& [id, v] : want) {
            CHECK(g.rows[static_cast<size_t>(i)] == id);
            for (size_t k = 0; k < 2; ++k) CHECK(g.row(i)[k] == Approx(v[k]).margin(1e-6));
            ++i;
        }
        CHECK(bias[0] == Approx((n - 1) / 2.0));
    }
}

TEST_CASE("a rank with no rows, and all ranks with none", "[sparse_sync]") {
    auto comm = comm::make_communicator("ring");
    const int n = world_size();
    for (auto method : {SparseSyncMethod::Allgather, SparseSyncMethod::Dense, SparseSyncMethod::Auto}) {
        INFO(method_name(method));
        SparseGradientSync sync(*comm, 300, 3, method);
        // Rank n-1 (rank 0 at np 1) touched nothing; its SparseRows is as default-constructed (width 0).
        RankGrad g = make_grad(world_rank(), 300, 3, 2, 0.2f, 77, n - 1);
        if (world_rank() == n - 1) g.rows = SparseRows{};
        sync.average(g.rows, g.dense);
        check_against(reference(300, 3, 2, 0.2f, 77, n - 1), g.rows, g.dense);
        CHECK(g.rows.width == 3);

        // Nobody touched anything: no rows come back, the dense part is still averaged.
        SparseRows none;
        none.width = 3;
        std::vector<float> bias{float(world_rank()), 1.0f};
        sync.average(none, bias);
        CHECK(none.count() == 0);
        CHECK(none.values.empty());
        CHECK(bias[0] == Approx((n - 1) / 2.0));
        CHECK(bias[1] == Approx(1.0));
    }
}

TEST_CASE("auto picks allgather for few rows and dense for many, and counts them", "[sparse_sync]") {
    auto comm = comm::make_communicator("ring");
    const int n = world_size();
    const int64_t rows = 2000, width = 1;
    SparseGradientSync sync(*comm, rows, width, SparseSyncMethod::Auto);
    std::vector<float> bias{1.0f};

    RankGrad few = make_grad(world_rank(), rows, width, 1, 0.005f, 5);  // ~10 rows a rank
    const uint64_t few_payload = static_cast<uint64_t>(few.rows.count() * 2 + 1) * 4;
    sync.average(few.rows, few.dense);
    CHECK(sync.stats().allgather_steps == 1);
    CHECK(sync.stats().dense_steps == 0);
    CHECK(sync.stats().bytes_allgather == static_cast<uint64_t>(n - 1) * few_payload);

    RankGrad many = make_grad(world_rank(), rows, width, 1, 0.9f, 6);  // ~1800 rows a rank
    sync.average(many.rows, many.dense);
    check_against(reference(rows, width, 1, 0.9f, 6), many.rows, many.dense);
    if (n == 1) {  // nothing moves on one rank: allgather (the identity) every time
        CHECK(sync.stats().allgather_steps == 2);
        CHECK(sync.stats().dense_steps == 0);
        CHECK(sync.stats().bytes_dense == 0);
    } else {
        CHECK(sync.stats().allgather_steps == 1);
        CHECK(sync.stats().dense_steps == 1);
        // 2(N-1)/N of [2000 values | 1 bias | ceil(2000 / floor(24 / bit_width(N))) markers]
        const uint64_t per = 24 / static_cast<uint64_t>(std::bit_width(static_cast<unsigned>(n)));
        const uint64_t floats = 2000 + 1 + (2000 + per - 1) / per;
        CHECK(sync.stats().bytes_dense == 2 * static_cast<uint64_t>(n - 1) * floats * 4 / static_cast<uint64_t>(n));
    }
}

TEST_CASE("malformed gradients are refused before anything is sent", "[sparse_sync]") {
    auto comm = comm::make_communicator("ring");
    SparseGradientSync sync(*comm, 10, 2, SparseSyncMethod::Allgather);
    std::vector<float> bias{0.0f};
    SparseRows unsorted;
    unsorted.width = 2;
    unsorted.rows = {3, 1};
    unsorted.values.assign(4, 1.0f);
    CHECK_THROWS_WITH(sync.average(unsorted, bias), Catch::Contains("not sorted and unique"));
    SparseRows past;
    past.width = 2;
    past.rows = {10};
    past.values.assign(2, 1.0f);
    CHECK_THROWS_WITH(sync.average(past, bias), Catch::Contains("past the table's 10 rows"));
    SparseRows narrow;
    narrow.width = 1;
    narrow.rows = {1};
    narrow.values.assign(1, 1.0f);
    CHECK_THROWS_WITH(sync.average(narrow, bias), Catch::Contains("1 wide"));
    CHECK_THROWS_AS(SparseGradientSync(*comm, 0, 1, SparseSyncMethod::Auto), Error);
}

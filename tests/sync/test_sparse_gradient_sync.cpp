// SparseGradientSync under mpirun at 1–4 ranks: both ways (allgather + merge, dense allreduce) and auto against a
// serial reference that every rank computes from every rank's seeded gradient; duplicate rows across ranks, ranks
// without rows, the byte arithmetic of choose() and the stats; and the whole sparse step (SparseLinear, the loss,
// the sync, each sparse optimizer) on N ranks x batch B against one process on batch N*B.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <bit>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/serial_reference.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/sparse_rows.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/nn/loss.hpp"
#include "ringtrain/nn/sparse_linear.hpp"
#include "ringtrain/optim/sparse_optimizer.hpp"
#include "ringtrain/sync/sparse_gradient_sync.hpp"

using namespace ringtrain;
using rt_test::world_rank;
using rt_test::world_size;
using sync::SparseGradientSync;
using sync::SparseSyncMethod;
using sync::SparseUpdate;

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

// Every [rows, K] and [K] tensor of a sparse layer and its optimizer, in a fixed order.
std::vector<std::span<const float>> all_tensors(nn::SparseLinear& layer, optim::SparseOptimizer& opt) {
    std::vector<std::span<const float>> v{layer.weight().value.span(), layer.bias().value.span()};
    for (auto& [name, t] : opt.state()) v.push_back(t->span());
    return v;
}

bool same_tensors_on_every_rank(comm::Communicator& comm, nn::SparseLinear& layer, optim::SparseOptimizer& opt) {
    uint64_t h = kFnv1aOffsetBasis;
    for (std::span<const float> t : all_tensors(layer, opt)) h = fnv1a(t.data(), t.size() * sizeof(float), h);
    for (uint64_t other : comm.allgather(h))
        if (other != h) return false;
    return true;
}

const char* update_name(SparseUpdate u) { return u == SparseUpdate::Owner ? "owner" : "replicated"; }

// One synchronous update as the trainer makes it: the rank average, the update, and with owner updates the updated
// rows (weight and optimizer state) shared with every rank and written in.
void average_and_apply(SparseGradientSync& sync, optim::SparseOptimizer& opt, SparseRows& grad,
                       std::vector<float>& bias_grad, float lr) {
    sync.average(grad, bias_grad);
    opt.apply(grad, bias_grad, lr);
    if (!sync.owned_rows_only()) return;
    SparseRows shipped;
    opt.export_rows(grad.rows, shipped);
    sync.share_updated_rows(shipped);
    opt.import_rows(shipped);
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

TEST_CASE("rows that fit the gathered slots take one collective, rows past them a second, same result", "[sparse_sync]") {
    const int n = world_size();
    for (const char* backend : {"ring", "mpi"}) {
        INFO(backend);
        auto comm = comm::make_communicator(backend);
        const int64_t rows = 5000, width = 2;
        SparseGradientSync sync(*comm, rows, width, SparseSyncMethod::Allgather);
        // Step 1: no room yet (every rank's rows come second); 2: ~ as many rows, they fit the room step 1 sized;
        // 3: ten times as many, past the room again; 4: one rank with none, the others few.
        const float density[] = {0.02f, 0.02f, 0.2f, 0.01f};
        const int64_t want_second[] = {1, 1, 2, 2};
        for (int step = 0; step < 4; ++step) {
            INFO("step " << step);
            const uint64_t seed = 900 + static_cast<uint64_t>(step);
            const int empty = step == 3 ? 0 : -1;
            RankGrad g = make_grad(world_rank(), rows, width, 1, density[step], seed, empty);
            sync.average(g.rows, g.dense);
            check_against(reference(rows, width, 1, density[step], seed, empty), g.rows, g.dense);
            CHECK(same_on_every_rank(*comm, g.rows, g.dense));
            CHECK(sync.stats().second_collectives == (n > 1 ? want_second[step] : 0));
        }
        CHECK(sync.stats().allgather_steps == 4);
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

// ---- the whole sparse step: N ranks x batch B = 1 rank x batch N*B ----------------------------------------------

namespace {

// Row `g` of the endless test stream: up to 12 features of 300, a label for K outputs.
void add_stream_row(CsrBatch& b, int64_t g, int64_t K) {
    Rng rng(static_cast<uint64_t>(g) * 2654435761u + 1u);
    std::vector<uint32_t> idx;
    std::vector<float> val;
    for (uint32_t f = 0; f < 300 && idx.size() < 12; f += 1 + static_cast<uint32_t>(rng.below(40))) {
        idx.push_back(f);
        val.push_back(rng.uniform(0.2f, 1.0f));
    }
    b.add_row(static_cast<float>(rng.below(static_cast<uint64_t>(K == 1 ? 2 : K))), idx, val);
}

struct SparseStep {
    nn::SparseLinear layer;
    std::unique_ptr<nn::Loss> loss;
    std::unique_ptr<optim::SparseOptimizer> opt;
    SparseRows grad;
    std::vector<float> bias_grad;
    Tensor logits, labels, dlogits;

    SparseStep(int64_t K, const optim::SparseOptimizerOptions& o)
        : layer("sparse", 300, K), loss(nn::make_loss(K == 1 ? "sigmoid_bce" : "softmax_cross_entropy")),
          opt(optim::make_sparse_optimizer(o, layer.weight(), layer.bias())), bias_grad(static_cast<size_t>(K)) {}

    // Forward, mean loss gradient over the batch, backward; then (when given) the rank average; then the update.
    void run(const CsrBatch& b, SparseGradientSync* sync, float lr) {
        layer.forward(b, logits);
        labels.resize({b.rows()});
        std::copy(b.labels.begin(), b.labels.end(), labels.data());
        loss->forward(logits, labels);
        loss->backward(labels, 1.0f / static_cast<float>(b.rows()), dlogits);
        layer.backward(b, dlogits.data(), grad, bias_grad);
        if (sync)
            average_and_apply(*sync, *opt, grad, bias_grad, lr);
        else
            opt->apply(grad, bias_grad, lr);
    }
};

}  // namespace

TEST_CASE("N ranks x batch B give the parameters of 1 rank x batch N*B", "[sparse_sync][equivalence]") {
    auto comm = comm::make_communicator("ring");
    const int n = world_size(), me = world_rank();
    const int64_t B = 6;
    for (int64_t K : {int64_t{1}, int64_t{3}})
        for (const char* name : {"sgd", "adagrad", "ftrl"})
            for (auto [method, update] : {std::pair{SparseSyncMethod::Allgather, SparseUpdate::Replicated},
                                          std::pair{SparseSyncMethod::Allgather, SparseUpdate::Owner},
                                          std::pair{SparseSyncMethod::Dense, SparseUpdate::Replicated},
                                          std::pair{SparseSyncMethod::Auto, SparseUpdate::Owner}}) {
                INFO("K " << K << " " << name << " " << method_name(method) << " " << update_name(update));
                optim::SparseOptimizerOptions o;
                o.name = name;
                o.initial_accumulator = 0.1f;
                o.l1 = 0.001f;
                o.l2 = 0.01f;
                SparseStep ranked(K, o), serial(K, o);
                SparseGradientSync sync(*comm, 300, K, method, update);
                for (int64_t step = 0; step < 6; ++step) {
                    CsrBatch mine, all;
                    for (int64_t i = 0; i < n * B; ++i) add_stream_row(all, step * n * B + i, K);
                    for (int64_t i = me * B; i < (me + 1) * B; ++i) add_stream_row(mine, step * n * B + i, K);
                    ranked.run(mine, &sync, 0.3f);
                    serial.run(all, nullptr, 0.3f);
                }
                const auto a = ranked.layer.named_spans(), b = serial.layer.named_spans();
                int64_t nonzero = 0;
                for (size_t p = 0; p < a.size(); ++p)
                    for (size_t i = 0; i < a[p].values.size(); ++i) {
                        REQUIRE(a[p].values[i] == Approx(b[p].values[i]).margin(2e-5));
                        nonzero += a[p].values[i] != 0.0f;
                    }
                CHECK(nonzero > 50);
                // The table, bias and optimizer state hold the same bits on every rank (owner updates included).
                CHECK(same_tensors_on_every_rank(*comm, ranked.layer, *ranked.opt));
            }
}

// ---- owner updates: each rank merges and updates its own range of rows, then shares them --------------------------

TEST_CASE("row ownership: a hash of the id, even for runs of ids and strided ids", "[sparse_sync][owner]") {
    for (int n = 1; n <= 5; ++n) {
        INFO("N " << n);
        // Frequency-ranked libsvm ids (a run from 0), a run high in a 2^32 space, and strided ids (a field
        // layout): every rank owns about 1/N of each.
        for (auto [first, stride] : {std::pair<uint64_t, uint64_t>{0, 1}, {4294000000u, 1}, {0, 8}, {5, 26}}) {
            std::vector<int> owned(static_cast<size_t>(n), 0);
            const int ids = 12000;
            for (int i = 0; i < ids; ++i) {
                const int o = SparseGradientSync::owner_of_row(static_cast<uint32_t>(first + stride * uint64_t(i)), n);
                REQUIRE((o >= 0 && o < n));
                ++owned[static_cast<size_t>(o)];
            }
            for (int c : owned) CHECK(std::abs(c - ids / n) < ids / n / 20);  // within 5 % of an even share
        }
    }
}

namespace {

// Only the rows of g that `owner` owns kept.
void keep_rows_owned_by(RankGrad& g, int owner) {
    SparseRows kept;
    kept.width = g.rows.width;
    for (int64_t i = 0; i < g.rows.count(); ++i) {
        const uint32_t id = g.rows.rows[static_cast<size_t>(i)];
        if (SparseGradientSync::owner_of_row(id, world_size()) != owner) continue;
        kept.rows.push_back(id);
        kept.values.insert(kept.values.end(), g.rows.row(i).begin(), g.rows.row(i).end());
    }
    g.rows = std::move(kept);
}

// The owner test's steps: what each rank's gradient looks like.
enum class GradShape { Spread, LastRankEmpty, FirstOwnerOnly, LastOwnerOnly, Dense };

RankGrad owner_case_grad(GradShape shape, int64_t rows, int64_t width, uint64_t seed) {
    const int n = world_size(), me = world_rank();
    const float density = shape == GradShape::Dense ? 0.6f : 0.03f;
    RankGrad g = make_grad(me, rows, width, static_cast<size_t>(width), density, seed,
                           shape == GradShape::LastRankEmpty ? n - 1 : -1);
    if (shape == GradShape::LastRankEmpty && me == n - 1) g.rows = SparseRows{};
    if (shape == GradShape::FirstOwnerOnly) keep_rows_owned_by(g, 0);
    if (shape == GradShape::LastOwnerOnly) keep_rows_owned_by(g, n - 1);
    return g;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return false;
    return true;
}

}  // namespace

TEST_CASE("owner updates leave weights and optimizer state bit-identical to replicated updates",
          "[sparse_sync][owner]") {
    const int n = world_size();
    const int64_t rows = 997;
    // Step 0 finds no room in either gather (a second collective each), 1 fits, 2 has a rank with no rows, 3 and 4
    // touch only the first / the last owner's rows (the other owners update nothing), 5 is past the room again.
    const GradShape steps[] = {GradShape::Spread,         GradShape::Spread,        GradShape::LastRankEmpty,
                           GradShape::FirstOwnerOnly, GradShape::LastOwnerOnly, GradShape::Dense};
    for (const char* backend : {"ring", "mpi"}) {
        auto comm = comm::make_communicator(backend);
        for (int64_t K : {int64_t{1}, int64_t{3}})
            for (const char* name : {"sgd", "adagrad", "ftrl"}) {
                INFO(backend << " K " << K << " " << name);
                optim::SparseOptimizerOptions o;
                o.name = name;
                o.initial_accumulator = 0.1f;
                o.l1 = 0.05f;
                o.l2 = 0.01f;
                nn::SparseLinear layer_r("sparse", rows, K), layer_o("sparse", rows, K);
                auto opt_r = optim::make_sparse_optimizer(o, layer_r.weight(), layer_r.bias());
                auto opt_o = optim::make_sparse_optimizer(o, layer_o.weight(), layer_o.bias());
                SparseGradientSync replicated(*comm, rows, K, SparseSyncMethod::Allgather, SparseUpdate::Replicated);
                SparseGradientSync owner(*comm, rows, K, SparseSyncMethod::Allgather, SparseUpdate::Owner);
                uint64_t seed = 4000;
                for (GradShape shape : steps) {
                    ++seed;
                    RankGrad a = owner_case_grad(shape, rows, K, seed), b = a;
                    average_and_apply(replicated, *opt_r, a.rows, a.dense, 0.4f);
                    average_and_apply(owner, *opt_o, b.rows, b.dense, 0.4f);
                    CHECK_FALSE(owner.owned_rows_only());  // consumed by the share
                }
                const auto want = all_tensors(layer_r, *opt_r), got = all_tensors(layer_o, *opt_o);
                REQUIRE(want.size() == got.size());
                for (size_t t = 0; t < want.size(); ++t) CHECK(same_bits(want[t], got[t]));
                CHECK(same_tensors_on_every_rank(*comm, layer_o, *opt_o));
                int64_t nonzero = 0;
                for (float w : layer_o.weight().value.span()) nonzero += w != 0.0f;
                CHECK(nonzero > 30);

                const auto& st = owner.stats();
                const auto& sr = replicated.stats();
                if (n == 1) {  // one rank: nothing to share, the update is the replicated one
                    CHECK(st.owner_steps == 0);
                    CHECK(st.bytes_state == 0);
                } else {
                    CHECK(st.owner_steps == 6);
                    CHECK(sr.owner_steps == 0);
                    CHECK(st.bytes_state > 0);
                    CHECK(st.bytes_allgather == sr.bytes_allgather + st.bytes_state);
                    CHECK(st.state_second_collectives == 2);  // step 0 (no room yet) and step 5 (past it)
                    CHECK(st.second_collectives == sr.second_collectives);
                }
            }
    }
}

TEST_CASE("an owner's merged rows are replicated's rows it owns, to the bit (signed zeros too)",
          "[sparse_sync][owner]") {
    const int n = world_size(), me = world_rank();
    auto comm = comm::make_communicator("ring");
    const int64_t rows = 1000, K = 2;
    SparseGradientSync replicated(*comm, rows, K, SparseSyncMethod::Allgather, SparseUpdate::Replicated);
    SparseGradientSync owner(*comm, rows, K, SparseSyncMethod::Allgather, SparseUpdate::Owner);
    for (int step = 0; step < 4; ++step) {
        INFO("step " << step);
        RankGrad a = make_grad(me, rows, K, 1, 0.05f + 0.1f * static_cast<float>(step), 70 + static_cast<uint64_t>(step));
        // -0.0 in every third value: a row one rank alone holds adds +0.0 in the merge, wherever its list ends.
        for (size_t i = 0; i < a.rows.values.size(); i += 3) a.rows.values[i] = -0.0f;
        RankGrad b = a;
        replicated.average(a.rows, a.dense);
        owner.average(b.rows, b.dense);
        CHECK(owner.owned_rows_only() == (n > 1));
        keep_rows_owned_by(a, me);
        CHECK(b.rows.rows == a.rows.rows);
        CHECK(same_bits(b.rows.values, a.rows.values));
        CHECK(same_bits(b.dense, a.dense));
        if (owner.owned_rows_only()) {  // the share is collective: every rank takes part in it
            SparseRows mine;
            mine.width = 1;
            mine.rows = b.rows.rows;
            mine.values.assign(b.rows.rows.size(), static_cast<float>(me));
            // The trainer's opening allreduce rides along: numbers summed over the ranks in the same collective.
            double sums[2] = {static_cast<double>(me), 0.5};
            owner.share_updated_rows(mine, sums);
            CHECK(sums[0] == n * (n - 1) / 2.0);
            CHECK(sums[1] == 0.5 * n);
            // The others' rows, rank by rank: rows other ranks own, each carrying its owner's tag.
            size_t i = 0;
            for (uint32_t id : mine.rows) {
                const int owner_rank = SparseGradientSync::owner_of_row(id, n);
                CHECK(owner_rank != me);
                CHECK(mine.values[i++] == static_cast<float>(owner_rank));
            }
        }
    }
}

TEST_CASE("the dense way and one rank keep the whole union; misuse of the share is refused", "[sparse_sync][owner]") {
    const int n = world_size(), me = world_rank();
    auto comm = comm::make_communicator("ring");
    SparseGradientSync dense(*comm, 200, 1, SparseSyncMethod::Dense, SparseUpdate::Owner);
    RankGrad g = make_grad(me, 200, 1, 1, 0.3f, 9);
    dense.average(g.rows, g.dense);
    CHECK_FALSE(dense.owned_rows_only());
    check_against(reference(200, 1, 1, 0.3f, 9), g.rows, g.dense);
    SparseRows any;
    any.width = 1;
    CHECK_THROWS_WITH(dense.share_updated_rows(any), Catch::Contains("not an owner step"));
    if (n == 1) return;
    SparseGradientSync owner(*comm, 200, 1, SparseSyncMethod::Allgather, SparseUpdate::Owner);
    RankGrad h = make_grad(me, 200, 1, 1, 0.3f, 10);
    owner.average(h.rows, h.dense);
    REQUIRE(owner.owned_rows_only());
    // A row outside this rank's range is refused before anything is sent (then the real share, on every rank).
    SparseRows foreign;
    foreign.width = 1;
    uint32_t other = 0;
    while (SparseGradientSync::owner_of_row(other, n) == me) ++other;
    foreign.rows = {other};
    foreign.values = {1.0f};
    CHECK_THROWS_WITH(owner.share_updated_rows(foreign), Catch::Contains("is not this rank's"));
    SparseRows mine;
    mine.width = 1;
    mine.rows = h.rows.rows;
    mine.values.assign(mine.rows.size(), 1.0f);
    owner.share_updated_rows(mine);
}

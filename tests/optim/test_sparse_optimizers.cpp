// Sparse optimizers: SGD, AdaGrad and FTRL-Proximal against values worked out by hand from the formulas in
// sparse_optimizer.hpp (two steps on a 3-row table, one row never touched); touched-rows-only updates bit-equal to
// the dense update with zero rows; the state round-trips through its named tensors; bad options and gradients.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/optim/sparse_optimizer.hpp"

using namespace ringtrain;
using namespace ringtrain::optim;

namespace {

struct Table {
    nn::Parameter weight, bias;
    Table(int64_t rows, int64_t K) {
        weight = {"sparse.weight", Tensor::zeros({rows, K}), Tensor()};
        bias = {"sparse.bias", Tensor::zeros({K}), Tensor()};
    }
    float w(int64_t i) const { return weight.value.data()[i]; }
    float b(int64_t k = 0) const { return bias.value.data()[k]; }
};

SparseRows rows_of(int64_t width, std::vector<uint32_t> ids, std::vector<float> values) {
    SparseRows g;
    g.width = width;
    g.rows = std::move(ids);
    g.values = std::move(values);
    return g;
}

SparseOptimizerOptions options(const std::string& name) {
    SparseOptimizerOptions o;
    o.name = name;
    return o;
}

}  // namespace

TEST_CASE("sparse SGD by hand", "[optim][sparse]") {
    Table t(3, 1);
    auto opt = make_sparse_optimizer(options("sgd"), t.weight, t.bias);
    CHECK(opt->name() == "sgd");
    CHECK(opt->state().empty());
    std::vector<float> bg{0.2f};
    opt->apply(rows_of(1, {0, 2}, {0.5f, -1.0f}), bg, 0.1f);
    CHECK(t.w(0) == Approx(-0.05));  // 0 - 0.1 * 0.5
    CHECK(t.w(1) == 0.0f);
    CHECK(t.w(2) == Approx(0.1));    // 0 - 0.1 * -1
    CHECK(t.b() == Approx(-0.02));
    bg = {-0.2f};
    opt->apply(rows_of(1, {2}, {0.5f}), bg, 0.1f);
    CHECK(t.w(0) == Approx(-0.05));
    CHECK(t.w(2) == Approx(0.05));   // 0.1 - 0.1 * 0.5
    CHECK(t.b() == Approx(0.0).margin(1e-7));
    CHECK(opt->steps_taken() == 2);
}

TEST_CASE("sparse AdaGrad by hand", "[optim][sparse]") {
    Table t(3, 1);
    SparseOptimizerOptions o = options("adagrad");
    o.initial_accumulator = 0.1f;
    o.eps = 1e-10f;
    auto opt = make_sparse_optimizer(o, t.weight, t.bias);
    auto st = opt->state();
    REQUIRE(st.size() == 2);
    CHECK(st[0].first == "sparse.weight.adagrad_sum");
    CHECK(st[1].first == "sparse.bias.adagrad_sum");
    const float* s = st[0].second->data();
    const float lr = 0.5f;

    // Step 1: g = (1, -, -2), bias 0.5. s = 0.1 + g^2; w = -lr g / sqrt(s).
    std::vector<float> bg{0.5f};
    opt->apply(rows_of(1, {0, 2}, {1.0f, -2.0f}), bg, lr);
    CHECK(s[0] == Approx(1.1));
    CHECK(s[1] == 0.1f);  // untouched
    CHECK(s[2] == Approx(4.1));
    CHECK(t.w(0) == Approx(-0.4767312946));  // -0.5 * 1 / sqrt(1.1)
    CHECK(t.w(1) == 0.0f);
    CHECK(t.w(2) == Approx(0.4938647983));   // -0.5 * -2 / sqrt(4.1)
    CHECK(t.b() == Approx(-0.4225771274));   // -0.5 * 0.5 / sqrt(0.35)

    // Step 2: g = (-1, -, -), bias 0.5.
    opt->apply(rows_of(1, {0}, {-1.0f}), bg, lr);
    CHECK(s[0] == Approx(2.1));
    CHECK(t.w(0) == Approx(-0.1316985150));  // -0.4767313 + 0.5 / sqrt(2.1)
    CHECK(t.w(2) == Approx(0.4938647983));
    CHECK(t.b() == Approx(-0.7453257395));   // -0.4225771 - 0.25 / sqrt(0.6)
}

TEST_CASE("FTRL-Proximal by hand", "[optim][sparse]") {
    Table t(3, 1);
    SparseOptimizerOptions o = options("ftrl");
    o.beta = 1.0f;
    o.l1 = 0.1f;
    o.l2 = 0.2f;
    auto opt = make_sparse_optimizer(o, t.weight, t.bias);
    auto st = opt->state();
    REQUIRE(st.size() == 4);
    CHECK(st[0].first == "sparse.weight.ftrl_z");
    CHECK(st[1].first == "sparse.weight.ftrl_n");
    CHECK(st[2].first == "sparse.bias.ftrl_z");
    CHECK(st[3].first == "sparse.bias.ftrl_n");
    const float* z = st[0].second->data();
    const float* n = st[1].second->data();
    const float alpha = 0.5f;

    // Step 1: g = (1, -, -0.05), bias 0.4.
    //   row 0: n = 1, sigma = (1 - 0)/0.5 = 2, z = 1 - 2*0 = 1, w = -(1 - 0.1) / ((1 + 1)/0.5 + 0.2) = -0.9/4.2
    //   row 2: n = 0.0025, z = -0.05, |z| <= l1 = 0.1, so w = 0 (L1 keeps a weakly supported weight at zero)
    //   bias (l1 = l2 = 0): n = 0.16, z = 0.4, w = -0.4 / ((1 + 0.4)/0.5) = -0.4/2.8
    std::vector<float> bg{0.4f};
    opt->apply(rows_of(1, {0, 2}, {1.0f, -0.05f}), bg, alpha);
    CHECK(z[0] == Approx(1.0));
    CHECK(n[0] == Approx(1.0));
    CHECK(t.w(0) == Approx(-0.9 / 4.2));
    CHECK(z[2] == Approx(-0.05));
    CHECK(n[2] == Approx(0.0025));
    CHECK(t.w(2) == 0.0f);
    CHECK((z[1] == 0.0f && n[1] == 0.0f && t.w(1) == 0.0f));
    CHECK(t.b() == Approx(-0.4 / 2.8));

    // Step 2: g = (0.5, -, -0.3), bias -0.2.
    //   row 0: n = 1.25, sigma = (sqrt(1.25) - 1)/0.5 = 0.2360680, z = 1 + 0.5 - sigma * (-0.9/4.2) = 1.5505860,
    //          w = -(z - 0.1) / ((1 + sqrt(1.25))/0.5 + 0.2) = -0.3269981
    //   row 2: n = 0.0925, sigma = (sqrt(0.0925) - 0.05)/0.5, z = -0.05 - 0.3 - sigma * 0 = -0.35,
    //          w = -(-0.35 + 0.1) / ((1 + sqrt(0.0925))/0.5 + 0.2) = 0.0890226
    //   bias:  n = 0.2, sigma = (sqrt(0.2) - 0.4)/0.5, z = 0.4 - 0.2 - sigma * (-0.4/2.8) = 0.2134896,
    //          w = -z / ((1 + sqrt(0.2))/0.5) = -0.0737588
    bg = {-0.2f};
    opt->apply(rows_of(1, {0, 2}, {0.5f, -0.3f}), bg, alpha);
    CHECK(n[0] == Approx(1.25));
    CHECK(z[0] == Approx(1.5505859952));
    CHECK(t.w(0) == Approx(-0.3269981440));
    CHECK(z[2] == Approx(-0.35));
    CHECK(n[2] == Approx(0.0925));
    CHECK(t.w(2) == Approx(0.0890225809));
    CHECK(t.b() == Approx(-0.0737588423));
    CHECK(t.w(1) == 0.0f);

    // A positive learning rate is FTRL's alpha; 0 would divide by zero.
    CHECK_THROWS_WITH(opt->apply(rows_of(1, {0}, {1.0f}), bg, 0.0f), Catch::Contains("must be positive"));
}

TEST_CASE("touched-rows-only updates equal the dense update with zero rows", "[optim][sparse]") {
    const int64_t rows = 40, K = 2;
    for (const char* name : {"sgd", "adagrad", "ftrl"}) {
        INFO(name);
        SparseOptimizerOptions o = options(name);
        o.initial_accumulator = 0.1f;
        o.l1 = 0.05f;
        o.l2 = 0.1f;
        Table sparse(rows, K), dense(rows, K);
        auto a = make_sparse_optimizer(o, sparse.weight, sparse.bias);
        auto b = make_sparse_optimizer(o, dense.weight, dense.bias);
        Rng rng(3);
        for (int step = 0; step < 12; ++step) {
            SparseRows g, all;
            g.width = all.width = K;
            for (uint32_t r = 0; r < rows; ++r) {
                const bool touched = rng.uniform() < 0.3f;
                all.rows.push_back(r);
                for (int64_t k = 0; k < K; ++k) {
                    const float v = touched ? rng.uniform(-1.0f, 1.0f) : 0.0f;
                    all.values.push_back(v);
                    if (touched) g.values.push_back(v);
                }
                if (touched) g.rows.push_back(r);
            }
            std::vector<float> bg{rng.uniform(-1.0f, 1.0f), rng.uniform(-1.0f, 1.0f)};
            // A schedule changes lr between steps; FTRL's w depends on alpha, so there it is held constant (header).
            const float lr = std::string(name) == "ftrl" ? 0.3f : 0.3f / static_cast<float>(1 + step % 3);
            a->apply(g, bg, lr);
            b->apply(all, bg, lr);
        }
        // Bit for bit: a zero gradient row changes nothing in any of the three.
        for (int64_t i = 0; i < rows * K; ++i) REQUIRE(sparse.w(i) == dense.w(i));
        for (int64_t k = 0; k < K; ++k) REQUIRE(sparse.b(k) == dense.b(k));
        auto sa = a->state(), sb = b->state();
        REQUIRE(sa.size() == sb.size());
        for (size_t s = 0; s < sa.size(); ++s)
            for (int64_t i = 0; i < sa[s].second->numel(); ++i) REQUIRE(sa[s].second->data()[i] == sb[s].second->data()[i]);
        int64_t nonzero = 0;
        for (int64_t i = 0; i < rows * K; ++i) nonzero += sparse.w(i) != 0.0f;
        CHECK(nonzero > 0);
    }
}

TEST_CASE("sparse optimizer state round-trips through its named tensors", "[optim][sparse]") {
    const int64_t rows = 30, K = 3;
    for (const char* name : {"sgd", "adagrad", "ftrl"}) {
        INFO(name);
        SparseOptimizerOptions o = options(name);
        o.l1 = 0.01f;
        Table first(rows, K), resumed(rows, K);
        auto a = make_sparse_optimizer(o, first.weight, first.bias);
        Rng rng(17);
        auto step = [&](SparseOptimizer& opt, Rng& r) {
            SparseRows g;
            g.width = K;
            for (uint32_t i = 0; i < rows; ++i)
                if (r.uniform() < 0.4f) {
                    g.rows.push_back(i);
                    for (int64_t k = 0; k < K; ++k) g.values.push_back(r.uniform(-1.0f, 1.0f));
                }
            std::vector<float> bg(K);
            for (float& v : bg) v = r.uniform(-1.0f, 1.0f);
            opt.apply(g, bg, 0.2f);
        };
        for (int s = 0; s < 3; ++s) step(*a, rng);

        // What a checkpoint does: save the parameters, the named state and the step count, restore into new ones.
        resumed.weight.value.copy_from(first.weight.value);
        resumed.bias.value.copy_from(first.bias.value);
        auto b = make_sparse_optimizer(o, resumed.weight, resumed.bias);
        std::map<std::string, Tensor*> saved;
        for (auto& [n, t] : a->state()) saved[n] = t;
        for (auto& [n, t] : b->state()) {
            REQUIRE(saved.count(n) == 1);
            t->copy_from(*saved[n]);
        }
        b->set_steps_taken(a->steps_taken());

        Rng ra(99), rb(99);
        for (int s = 0; s < 3; ++s) {
            step(*a, ra);
            step(*b, rb);
        }
        for (int64_t i = 0; i < rows * K; ++i) REQUIRE(first.w(i) == resumed.w(i));
        for (int64_t k = 0; k < K; ++k) REQUIRE(first.b(k) == resumed.b(k));
        CHECK(b->steps_taken() == 6);
    }
}

TEST_CASE("step() applies the bound gradient", "[optim][sparse]") {
    Table t(4, 1);
    auto opt = make_sparse_optimizer(options("sgd"), t.weight, t.bias);
    CHECK_THROWS_WITH(opt->step(0.1f), Catch::Contains("bind_gradient"));
    SparseRows g = rows_of(1, {3}, {2.0f});
    std::vector<float> bg{1.0f};
    opt->bind_gradient(&g, bg);
    opt->step(0.5f);
    CHECK(t.w(3) == -1.0f);
    CHECK(t.b() == -0.5f);
    g.values[0] = 4.0f;  // the trainer refills the same buffers each step
    opt->step(0.5f);
    CHECK(t.w(3) == -3.0f);
    CHECK(opt->steps_taken() == 2);
}

TEST_CASE("sparse optimizers refuse bad options and gradients that do not fit", "[optim][sparse]") {
    Table t(5, 2);
    CHECK_THROWS_WITH(make_sparse_optimizer(options("adam"), t.weight, t.bias), Catch::Contains("sgd, adagrad or ftrl"));
    SparseOptimizerOptions o = options("ftrl");
    o.l1 = -1.0f;
    CHECK_THROWS_WITH(make_sparse_optimizer(o, t.weight, t.bias), Catch::Contains("optimizer.l1"));
    o = options("adagrad");
    o.eps = 0.0f;
    CHECK_THROWS_AS(make_sparse_optimizer(o, t.weight, t.bias), InputError);
    nn::Parameter odd{"b", Tensor::zeros({3}), Tensor()};
    CHECK_THROWS_AS(make_sparse_optimizer(options("sgd"), t.weight, odd), Error);

    auto opt = make_sparse_optimizer(options("sgd"), t.weight, t.bias);
    std::vector<float> bg{0.0f, 0.0f};
    CHECK_THROWS_AS(opt->apply(rows_of(2, {5}, {1.0f, 1.0f}), bg, 0.1f), Error);        // past the table
    CHECK_THROWS_AS(opt->apply(rows_of(2, {2, 1}, {1, 1, 1, 1}), bg, 0.1f), Error);     // out of order
    CHECK_THROWS_AS(opt->apply(rows_of(1, {1}, {1.0f}), bg, 0.1f), Error);              // wrong width
    std::vector<float> short_bias{0.0f};
    CHECK_THROWS_AS(opt->apply(rows_of(2, {1}, {1.0f, 1.0f}), short_bias, 0.1f), Error);
    CHECK(opt->steps_taken() == 0);
}

TEST_CASE("FTRL recomputes its weights from averaged state (local SGD)", "[optim][sparse]") {
    SparseOptimizerOptions o = options("ftrl");
    o.l1 = 0.1f;
    o.l2 = 0.2f;
    // Two "ranks" that saw different gradients; local SGD averages their z and n, then recomputes w.
    Table a(3, 1), b(3, 1), avg(3, 1);
    auto oa = make_sparse_optimizer(o, a.weight, a.bias), ob = make_sparse_optimizer(o, b.weight, b.bias);
    auto oavg = make_sparse_optimizer(o, avg.weight, avg.bias);
    std::vector<float> bg{0.4f};
    oa->apply(rows_of(1, {0, 1}, {1.0f, 0.1f}), bg, 0.5f);
    bg = {0.2f};
    ob->apply(rows_of(1, {0}, {3.0f}), bg, 0.5f);
    auto sa = oa->state(), sb = ob->state(), s = oavg->state();
    for (size_t i = 0; i < s.size(); ++i)
        for (int64_t j = 0; j < s[i].second->numel(); ++j)
            s[i].second->data()[j] = 0.5f * (sa[i].second->data()[j] + sb[i].second->data()[j]);
    oavg->recompute_weights(0.5f);
    // Row 0: z = (1 + 3)/2 = 2, n = (1 + 9)/2 = 5: w = -(2 - 0.1) / ((1 + sqrt 5)/0.5 + 0.2).
    CHECK(avg.w(0) == Approx(-1.9 / ((1.0 + std::sqrt(5.0)) / 0.5 + 0.2)));
    // Row 1: z = 0.05 <= l1: 0. Row 2: never touched: 0.
    CHECK(avg.w(1) == 0.0f);
    CHECK(avg.w(2) == 0.0f);
    // Bias (no L1/L2): z = (0.4 + 0.2)/2 = 0.3, n = (0.16 + 0.04)/2 = 0.1: w = -0.3 / ((1 + sqrt 0.1)/0.5).
    CHECK(avg.b() == Approx(-0.3 / ((1.0 + std::sqrt(0.1)) / 0.5)));
    // SGD and AdaGrad: their weights are not derived from state; nothing changes.
    Table t(2, 1);
    t.weight.value.data()[1] = 0.7f;
    make_sparse_optimizer(options("adagrad"), t.weight, t.bias)->recompute_weights(0.5f);
    CHECK(t.w(1) == 0.7f);
}

TEST_CASE("FTRL's weights of another state are recompute_weights' bits, computed aside (local SGD checkpoints)",
          "[optim][sparse]") {
    SparseOptimizerOptions o = options("ftrl");
    o.l1 = 0.05f;
    o.l2 = 0.1f;
    Table t(4, 2), other(4, 2);
    auto opt = make_sparse_optimizer(o, t.weight, t.bias), from = make_sparse_optimizer(o, other.weight, other.bias);
    std::vector<float> bg{0.3f, -0.1f};
    opt->apply(rows_of(2, {0, 2}, {1.0f, -0.5f, 0.25f, 2.0f}), bg, 0.4f);
    from->apply(rows_of(2, {1, 2}, {-1.5f, 0.5f, 0.75f, -2.0f}), bg, 0.4f);
    // `from`'s state, as a checkpoint's averaged copy would be: the weights it gives without touching `opt`.
    std::vector<Tensor> state;
    for (const auto& [name, tensor] : from->state()) {
        state.emplace_back(tensor->shape());
        state.back().copy_from(*tensor);
    }
    const std::vector<float> before(t.weight.value.data(), t.weight.value.data() + 8);
    Tensor w({4, 2}), b({2});
    opt->weights_for_state(state, 0.3f, w, b);
    CHECK(std::vector<float>(t.weight.value.data(), t.weight.value.data() + 8) == before);
    from->recompute_weights(0.3f);
    CHECK(std::vector<float>(w.data(), w.data() + 8) ==
          std::vector<float>(other.weight.value.data(), other.weight.value.data() + 8));
    CHECK(std::vector<float>(b.data(), b.data() + 2) ==
          std::vector<float>(other.bias.value.data(), other.bias.value.data() + 2));
    state.pop_back();
    CHECK_THROWS_AS(opt->weights_for_state(state, 0.3f, w, b), Error);
    // SGD and AdaGrad: nothing derives from state, nothing is written.
    Tensor untouched = Tensor::filled({4, 2}, 7.0f);
    make_sparse_optimizer(options("adagrad"), t.weight, t.bias)->weights_for_state({}, 0.3f, untouched, b);
    CHECK(untouched.data()[3] == 7.0f);
}

TEST_CASE("export_rows / import_rows carry a row's weight and per-row state bit for bit", "[optim][sparse][owner]") {
    // Owner updates: rank A updates rows, ships them, rank B writes them in; B must then be A for those rows (weight
    // and state), keep its other rows, and the next update on both must agree to the bit.
    const int64_t rows = 6, K = 2;
    for (const char* name : {"sgd", "adagrad", "ftrl"}) {
        INFO(name);
        SparseOptimizerOptions o = options(name);
        o.initial_accumulator = 0.1f;
        o.l1 = 0.01f;
        Table a(rows, K), b(rows, K);
        auto oa = make_sparse_optimizer(o, a.weight, a.bias), ob = make_sparse_optimizer(o, b.weight, b.bias);
        // [weight row | each [rows, K] state row]: sgd none, adagrad its sum, ftrl z and n.
        const int64_t parts = std::string(name) == "sgd" ? 1 : std::string(name) == "adagrad" ? 2 : 3;
        CHECK(oa->row_floats() == parts * K);
        std::vector<float> bg{0.1f, -0.2f};
        oa->apply(rows_of(K, {1, 3, 4}, {0.5f, -1.0f, 0.25f, 2.0f, -0.75f, 0.125f}), bg, 0.3f);
        oa->apply(rows_of(K, {3, 5}, {1.5f, 0.5f, -0.5f, 1.0f}), bg, 0.3f);
        ob->apply(rows_of(K, {0, 4}, {1.0f, 1.0f, 3.0f, -3.0f}), bg, 0.3f);  // B's own history on rows 0 and 4

        SparseRows shipped;
        const std::vector<uint32_t> ids{1, 3, 4};
        oa->export_rows(ids, shipped);
        CHECK(shipped.rows == ids);
        CHECK(shipped.width == oa->row_floats());
        REQUIRE(shipped.values.size() == 3 * static_cast<size_t>(parts * K));
        CHECK(shipped.values[0] == a.w(1 * K));  // row 1's weight leads its row
        ob->import_rows(shipped);

        // Rows 1, 3, 4 of every [rows, K] tensor are A's bits now; row 0 is still B's own, row 5 B's zero.
        auto sa = oa->state(), sb = ob->state();
        std::vector<std::pair<const float*, const float*>> tensors{{a.weight.value.data(), b.weight.value.data()}};
        for (size_t i = 0; i < sa.size(); ++i)
            if (sa[i].second->shape() == a.weight.value.shape())
                tensors.emplace_back(sa[i].second->data(), sb[i].second->data());
        CHECK(static_cast<int64_t>(tensors.size()) == parts);
        for (auto [ta, tb] : tensors)
            for (int64_t r : {1, 3, 4})
                for (int64_t k = 0; k < K; ++k)
                    CHECK(std::bit_cast<uint32_t>(ta[r * K + k]) == std::bit_cast<uint32_t>(tb[r * K + k]));
        CHECK(b.w(0) != 0.0f);  // B's row 0 kept (B's update made it nonzero, A never touched it)
        CHECK(b.w(5 * K) == 0.0f);

        // The next identical update of the imported rows gives identical bits on both.
        const SparseRows next = rows_of(K, {1, 3, 4}, {-0.5f, 0.5f, 1.0f, -1.0f, 0.5f, 0.25f});
        oa->apply(next, bg, 0.3f);
        ob->apply(next, bg, 0.3f);
        for (int64_t r : {1, 3, 4})
            for (int64_t k = 0; k < K; ++k)
                CHECK(std::bit_cast<uint32_t>(a.w(r * K + k)) == std::bit_cast<uint32_t>(b.w(r * K + k)));

        // Rows past the table, and rows of the wrong width, are refused.
        const std::vector<uint32_t> past{6};
        CHECK_THROWS_AS(oa->export_rows(past, shipped), Error);
        SparseRows narrow = rows_of(K, {1}, {1.0f, 2.0f});
        if (parts > 1) CHECK_THROWS_AS(ob->import_rows(narrow), Error);
        SparseRows beyond;
        beyond.width = oa->row_floats();
        beyond.rows = {6};
        beyond.values.assign(static_cast<size_t>(beyond.width), 0.0f);
        CHECK_THROWS_AS(ob->import_rows(beyond), Error);
    }
}

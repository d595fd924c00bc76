// SparseLinear: forward and the merged sparse gradient against the dense equivalent (the batch densified through
// nn::Linear) and against finite differences of the mean loss (sigmoid BCE at K = 1, softmax CE at K = 3); the
// touched-row merge on both of its paths (sort, scan) and across reused steps.
#include <catch2/catch.hpp>

#include <map>
#include <vector>

#include "gradient_check.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/nn/layers.hpp"
#include "ringtrain/nn/loss.hpp"
#include "ringtrain/nn/sparse_linear.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;

namespace {

// `rows` rows, each with up to `max_nnz` distinct increasing features below `features` (row 1 left empty), values
// in [-1.5, 1.5] (never exactly 0), labels 0..classes-1.
CsrBatch random_batch(Rng& rng, int64_t rows, int64_t features, int64_t max_nnz, int64_t classes) {
    CsrBatch b;
    for (int64_t r = 0; r < rows; ++r) {
        std::vector<uint32_t> idx;
        std::vector<float> val;
        if (r != 1) {
            for (int64_t f = 0; f < features && static_cast<int64_t>(idx.size()) < max_nnz; ++f)
                if (rng.uniform() < 0.4f) {
                    idx.push_back(static_cast<uint32_t>(f));
                    val.push_back((rng.uniform() < 0.5f ? -1.0f : 1.0f) * rng.uniform(0.1f, 1.5f));
                }
        }
        b.add_row(static_cast<float>(rng.below(static_cast<uint64_t>(classes))), idx, val);
    }
    return b;
}

void randomise(SparseLinear& layer, Rng& rng) {
    for (auto& s : layer.named_spans())
        for (float& v : s.values) v = rng.uniform(-0.5f, 0.5f);
}

Tensor labels_of(const CsrBatch& b) {
    Tensor t({b.rows()});
    std::copy(b.labels.begin(), b.labels.end(), t.data());
    return t;
}

// The batch as a dense [rows, features] matrix.
Tensor densify(const CsrBatch& b, int64_t features) {
    Tensor x = Tensor::zeros({b.rows(), features});
    for (int64_t r = 0; r < b.rows(); ++r)
        for (size_t j = 0; j < b.row_indices(r).size(); ++j) x.data()[r * features + b.row_indices(r)[j]] = b.row_values(r)[j];
    return x;
}

// The sparse gradient as a dense [features, K] table (rows not listed are 0).
std::vector<float> dense_table(const SparseRows& g, int64_t features) {
    std::vector<float> t(static_cast<size_t>(features * g.width), 0.0f);
    for (int64_t i = 0; i < g.count(); ++i)
        for (int64_t k = 0; k < g.width; ++k) t[static_cast<size_t>(g.rows[static_cast<size_t>(i)] * g.width + k)] = g.row(i)[static_cast<size_t>(k)];
    return t;
}

void check_against_dense(int64_t K, const std::string& loss_name) {
    const int64_t F = 11, B = 6;
    Rng rng(2024 + static_cast<uint64_t>(K));
    CsrBatch batch = random_batch(rng, B, F, 5, K == 1 ? 2 : K);
    SparseLinear layer("sparse", F, K);
    randomise(layer, rng);
    auto loss = make_loss(loss_name);
    const Tensor labels = labels_of(batch);
    const float scale = 1.0f / static_cast<float>(B);  // the trainer's loss scale: mean over the batch

    Tensor logits;
    layer.forward(batch, logits);
    REQUIRE(logits.shape() == Shape{B, K});
    loss->forward(logits, labels);
    Tensor dlogits;
    loss->backward(labels, scale, dlogits);
    SparseRows grad;
    std::vector<float> bias_grad(static_cast<size_t>(K));
    layer.backward(batch, dlogits.data(), grad, bias_grad);

    // Touched rows: exactly the features present in the batch, sorted.
    std::vector<uint32_t> present(batch.indices.begin(), batch.indices.end());
    std::sort(present.begin(), present.end());
    present.erase(std::unique(present.begin(), present.end()), present.end());
    REQUIRE(grad.rows == present);
    REQUIRE(present.size() < static_cast<size_t>(F));  // some feature untouched, so "absent = 0" is tested too
    REQUIRE(grad.width == K);

    SECTION("the dense equivalent: nn::Linear on the densified batch") {
        Linear dense(K);
        dense.set_name("dense");
        Rng build_rng(1);
        dense.build({F}, build_rng);
        auto params = dense.parameters();  // weight [K, F] = the table transposed, bias [K]
        for (int64_t f = 0; f < F; ++f)
            for (int64_t k = 0; k < K; ++k) params[0]->value.data()[k * F + f] = layer.weight().value.data()[f * K + k];
        params[1]->value.copy_from(layer.bias().value);
        Tensor x = densify(batch, F), y;
        dense.forward(x, y, ForwardContext{false, nullptr});
        for (int64_t i = 0; i < B * K; ++i) CHECK(logits.data()[i] == Approx(y.data()[i]).margin(1e-6));
        dense.backward(x, y, dlogits, nullptr, false);
        const std::vector<float> table = dense_table(grad, F);
        for (int64_t f = 0; f < F; ++f)
            for (int64_t k = 0; k < K; ++k)
                CHECK(table[static_cast<size_t>(f * K + k)] == Approx(params[0]->grad.data()[k * F + f]).margin(1e-6));
        for (int64_t k = 0; k < K; ++k) CHECK(bias_grad[static_cast<size_t>(k)] == Approx(params[1]->grad.data()[k]).margin(1e-6));
    }

    SECTION("finite differences of the mean loss") {
        gradcheck::Options o;
        o.eps = 1e-2;
        auto mean_loss = [&]() {
            Tensor z;
            layer.forward(batch, z);
            return loss->forward(z, labels).loss_sum / static_cast<double>(B);
        };
        gradcheck::Report rep;
        const std::vector<float> table = dense_table(grad, F);
        const auto num_w = gradcheck::numeric_gradient(layer.weight().value, o.eps, mean_loss);
        for (int64_t i = 0; i < F * K; ++i) gradcheck::compare(rep, o, "weight", i, table[static_cast<size_t>(i)], num_w[static_cast<size_t>(i)]);
        const auto num_b = gradcheck::numeric_gradient(layer.bias().value, o.eps, mean_loss);
        for (int64_t k = 0; k < K; ++k) gradcheck::compare(rep, o, "bias", k, bias_grad[static_cast<size_t>(k)], num_b[static_cast<size_t>(k)]);
        INFO(rep.first_failures);
        CHECK(rep.ok());
    }
}

// Reference merge: (feature -> summed value * dlogit) with a map.
std::map<uint32_t, std::vector<double>> reference_merge(const CsrBatch& b, const std::vector<float>& d, int64_t K) {
    std::map<uint32_t, std::vector<double>> m;
    for (int64_t r = 0; r < b.rows(); ++r)
        for (size_t j = 0; j < b.row_indices(r).size(); ++j) {
            auto& row = m[b.row_indices(r)[j]];
            row.resize(static_cast<size_t>(K), 0.0);
            for (int64_t k = 0; k < K; ++k) row[static_cast<size_t>(k)] += double(b.row_values(r)[j]) * d[static_cast<size_t>(r * K + k)];
        }
    return m;
}

void check_merge(SparseLinear& layer, const CsrBatch& b, Rng& rng) {
    const int64_t K = layer.out_features();
    std::vector<float> d(static_cast<size_t>(b.rows() * K));
    for (float& v : d) v = rng.uniform(-1.0f, 1.0f);
    SparseRows g;
    std::vector<float> bg(static_cast<size_t>(K));
    layer.backward(b, d.data(), g, bg);
    const auto want = reference_merge(b, d, K);
    REQUIRE(g.count() == static_cast<int64_t>(want.size()));
    int64_t i = 0;
    for (const auto& [id, row] : want) {
        REQUIRE(g.rows[static_cast<size_t>(i)] == id);
        for (int64_t k = 0; k < K; ++k) REQUIRE(g.row(i)[static_cast<size_t>(k)] == Approx(row[static_cast<size_t>(k)]).margin(1e-5));
        ++i;
    }
}

}  // namespace

TEST_CASE("sparse linear, K = 1 with sigmoid BCE, equals the dense layer and finite differences", "[nn][sparse]") {
    check_against_dense(1, "sigmoid_bce");
}

TEST_CASE("sparse linear, K = 3 with softmax cross-entropy, equals the dense layer and finite differences", "[nn][sparse]") {
    check_against_dense(3, "softmax_cross_entropy");
}

TEST_CASE("sparse linear starts at zero and names its parameters", "[nn][sparse]") {
    SparseLinear layer("sparse", 100, 2);
    for (auto& s : layer.named_spans())
        for (float v : s.values) REQUIRE(v == 0.0f);
    auto spans = layer.named_spans();
    REQUIRE(spans.size() == 2);
    CHECK(spans[0].name == "sparse.weight");
    CHECK(spans[0].values.size() == 200);
    CHECK(spans[1].name == "sparse.bias");
    CHECK(spans[1].values.size() == 2);
    CHECK(layer.parameters()[0]->value.shape() == Shape{100, 2});
    const uint64_t h0 = layer.hash();
    layer.weight().value.data()[57] = 1.0f;
    CHECK(layer.hash() != h0);
    layer.weight().value.data()[57] = 0.0f;
    CHECK(layer.hash() == h0);
    layer.bias().value.data()[1] = -1.0f;
    CHECK(layer.hash() != h0);
    CHECK_THROWS_AS(SparseLinear("bad", 0, 1), Error);
}

TEST_CASE("sparse linear merges duplicates across rows, on the sort and the scan path, step after step", "[nn][sparse]") {
    Rng rng(7);
    // A large feature space with few touched rows (sorted ids) and a small one nearly all touched (scan of marks),
    // each for several steps with different batches, so stale marks from one step would corrupt the next.
    SparseLinear big("big", 1 << 20, 2), small("small", 20, 3);
    for (int step = 0; step < 4; ++step) {
        CsrBatch b;
        for (int r = 0; r < 16; ++r) {
            std::vector<uint32_t> idx;
            for (int j = 0; j < 6; ++j) idx.push_back(static_cast<uint32_t>(rng.below(200)) * 5000u + static_cast<uint32_t>(j));
            std::sort(idx.begin(), idx.end());
            idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
            std::vector<float> val(idx.size());
            for (float& v : val) v = rng.uniform(-1.0f, 1.0f);
            b.add_row(0.0f, idx, val);
        }
        check_merge(big, b, rng);
        check_merge(small, random_batch(rng, 8, 20, 20, 3), rng);
    }
    // A feature with value 0 is still a touched row (its gradient 0); the bias sums dlogits.
    CsrBatch z;
    const std::vector<uint32_t> i1{3, 4}, i2{4};
    const std::vector<float> v1{0.0f, 2.0f}, v2{-1.0f};
    z.add_row(1.0f, i1, v1);
    z.add_row(0.0f, i2, v2);
    SparseLinear l("z", 10, 1);
    const std::vector<float> d{0.5f, 0.25f};
    SparseRows g;
    std::vector<float> bg(1);
    l.backward(z, d.data(), g, bg);
    REQUIRE(g.rows == std::vector<uint32_t>{3, 4});
    CHECK(g.values == std::vector<float>{0.0f, 2.0f * 0.5f - 0.25f});
    CHECK(bg[0] == 0.75f);
}

TEST_CASE("sparse linear refuses a feature past its table and stays usable", "[nn][sparse]") {
    SparseLinear l("s", 10, 1);
    CsrBatch bad;
    const std::vector<uint32_t> idx{2, 10};
    const std::vector<float> val{1.0f, 1.0f};
    bad.add_row(0.0f, idx, val);
    std::vector<float> logits(1), d{1.0f}, bg(1);
    CHECK_THROWS_WITH(l.forward(bad, logits.data()), Catch::Contains("feature 10 is past its 10 features"));
    SparseRows g;
    CHECK_THROWS_AS(l.backward(bad, d.data(), g, bg), Error);
    CsrBatch good;
    const std::vector<uint32_t> gi{2};
    const std::vector<float> gv{3.0f};
    good.add_row(0.0f, gi, gv);
    l.backward(good, d.data(), g, bg);  // the failed call left no marks behind
    REQUIRE(g.rows == std::vector<uint32_t>{2});
    CHECK(g.values == std::vector<float>{3.0f});
}

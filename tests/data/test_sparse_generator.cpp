// The click-log generator: its files parse, its labels follow the stated true model on exactly the parsed
// features (the truth's log loss is recomputed here from the read rows and click_log_true_weight), the true model
// beats the constant predictor, and the output depends only on the seed.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/click_log_generator.hpp"
#include "ringtrain/data/sparse_reader.hpp"
#include "test_sparse_files.hpp"

using namespace ringtrain;
using namespace ringtrain::data;
using Catch::Contains;
using sparse_test::TempDir;

namespace {

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// The mean log loss of the true model over every row the reader gives.
double reread_logloss(const ClickLogTruth& truth, const SparseReaderOptions& o, int64_t& rows) {
    auto reader = open_sparse_reader(o);
    REQUIRE(reader->num_features() == truth.num_features);
    reader->start_epoch(0);
    CsrBatch b;
    double sum = 0;
    rows = 0;
    while (reader->next(b, 100)) {
        for (int64_t r = 0; r < b.rows(); ++r) {
            double z = truth.spec.bias;
            const auto idx = b.row_indices(r);
            const auto val = b.row_values(r);
            for (size_t k = 0; k < idx.size(); ++k)
                z += static_cast<double>(static_cast<float>(
                         click_log_true_weight(truth.spec.model_seed, truth.spec.weight_scale, idx[k]))) * val[k];
            sum += b.labels[static_cast<size_t>(r)] > 0.5f ? std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
            ++rows;
        }
    }
    return sum / static_cast<double>(rows);
}

}  // namespace

TEST_CASE("generated Criteo files parse and follow the true model") {
    TempDir dir;
    for (const auto integers : {CriteoIntegers::Log2, CriteoIntegers::Hash}) {
        ClickLogSpec spec;
        spec.format = SparseFormat::Criteo;
        spec.rows = 4000;
        spec.seed = 11;
        spec.hash_bits = 16;
        spec.criteo_integers = integers;
        const ClickLogTruth truth = generate_click_log(spec, dir.file("c.txt.gz"));
        CHECK(truth.num_features == 65536);
        CHECK(truth.positives > 0);
        CHECK(truth.positives < spec.rows);
        CHECK(truth.true_logloss < truth.constant_logloss - 0.03);
        CHECK(std::abs(truth.true_logloss - truth.expected_logloss) < 0.03);
        SparseReaderOptions o;
        o.format = SparseFormat::Criteo;
        o.file = dir.file("c.txt.gz");
        o.hash_bits = 16;
        o.criteo_integers = integers;
        int64_t rows = 0;
        CHECK(reread_logloss(truth, o, rows) == Approx(truth.true_logloss).epsilon(1e-9));
        CHECK(rows == spec.rows);
        const auto j = truth.to_json();
        CHECK(j["true_logloss"].get<double>() == truth.true_logloss);
        CHECK(j["format"] == "criteo");
        CHECK(j.contains("weights"));
    }
}

TEST_CASE("generated libsvm files parse and follow the true model") {
    TempDir dir;
    ClickLogSpec spec;
    spec.format = SparseFormat::Libsvm;
    spec.rows = 4000;
    spec.seed = 5;
    spec.model_seed = 8;
    spec.features = 300;
    spec.weight_scale = 0.5;
    const ClickLogTruth truth = generate_click_log(spec, dir.file("l.svm"));
    CHECK(truth.num_features == 300);
    CHECK(truth.true_logloss < truth.constant_logloss - 0.03);
    SparseReaderOptions o;
    o.format = SparseFormat::Libsvm;
    o.file = dir.file("l.svm");
    o.num_features = 300;
    o.num_classes = 2;
    int64_t rows = 0;
    CHECK(reread_logloss(truth, o, rows) == Approx(truth.true_logloss).epsilon(1e-9));
    CHECK(rows == spec.rows);
}

TEST_CASE("the generator's output depends only on its seed") {
    TempDir dir;
    ClickLogSpec spec;
    spec.rows = 500;
    spec.seed = 9;
    generate_click_log(spec, dir.file("a.txt"));
    generate_click_log(spec, dir.file("b.txt"));
    spec.seed = 10;
    generate_click_log(spec, dir.file("c.txt"));
    CHECK(slurp(dir.file("a.txt")) == slurp(dir.file("b.txt")));
    CHECK(slurp(dir.file("a.txt")) != slurp(dir.file("c.txt")));
    spec.seed = 9;
    spec.model_seed = 2;  // same rows' features, another model: some labels differ
    generate_click_log(spec, dir.file("d.txt"));
    CHECK(slurp(dir.file("a.txt")) != slurp(dir.file("d.txt")));
    CHECK(slurp(dir.file("a.txt")).size() == slurp(dir.file("d.txt")).size());
    // The stated weight formula, pinned (a saved truth file must keep meaning the same weights).
    CHECK(click_log_true_weight(1, 1.0, 0) == Approx(click_log_true_weight(1, 2.0, 0) / 2));
    double mean = 0, var = 0;
    for (uint64_t j = 0; j < 20000; ++j) {
        const double w = click_log_true_weight(3, 1.0, j);
        mean += w;
        var += w * w;
    }
    CHECK(std::abs(mean / 20000) < 0.03);
    CHECK(std::abs(var / 20000 - 1.0) < 0.05);
}

TEST_CASE("bad generator specs are InputErrors") {
    TempDir dir;
    ClickLogSpec spec;
    spec.rows = 0;
    CHECK_THROWS_AS(generate_click_log(spec, dir.file("x")), InputError);
    spec.rows = 10;
    spec.hash_bits = 30;
    CHECK_THROWS_AS(generate_click_log(spec, dir.file("x")), InputError);
    spec.hash_bits = 10;
    CHECK_THROWS_WITH(generate_click_log(spec, dir.file("no/such/dir/x")), Contains("cannot create"));
}

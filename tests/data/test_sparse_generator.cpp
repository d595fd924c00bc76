// The click-log generator: its files parse, its labels follow the stated true model on exactly the parsed
// features (the truth's log loss is recomputed here from the read rows and click_log_true_weight), the true model
// beats the constant predictor, and the output depends only on the seed.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
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
    spec.model_seed = 2;  // the same draws from another model (its own categorical values and weights)
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

namespace {
// Every (column, value) of a Criteo file's categorical columns (C1..C26, after the label and 13 integers).
std::set<std::string> categorical_values(const std::string& path) {
    std::set<std::string> values;
    std::istringstream in(slurp(path));
    for (std::string line; std::getline(in, line);) {
        std::istringstream fields(line);
        std::string f;
        for (int c = 0; std::getline(fields, f, '\t'); ++c)
            if (c >= 14 && !f.empty()) values.insert(std::to_string(c) + ":" + f);
    }
    return values;
}
}  // namespace

// A test file is another seed from the same model: its categorical values must be the training file's (a model
// trained on one would otherwise know none of the other's). They once came from the row seed: no value in common.
TEST_CASE("Criteo files of two seeds and one model share their categorical values") {
    TempDir dir;
    ClickLogSpec spec;
    spec.rows = 2000;
    spec.seed = 1;
    generate_click_log(spec, dir.file("train.txt"));
    spec.seed = 2;
    generate_click_log(spec, dir.file("test.txt"));
    const auto train = categorical_values(dir.file("train.txt")), test = categorical_values(dir.file("test.txt"));
    size_t shared = 0;
    for (const auto& v : test) shared += train.count(v);
    INFO(shared << " of " << test.size() << " test values in the training file");
    CHECK(test.size() > 1000);
    CHECK(shared * 4 > test.size());  // the frequent values of a Zipf column appear in both (half, at 2000 rows)
    spec.model_seed = 7;  // another model: another vocabulary
    generate_click_log(spec, dir.file("other.txt"));
    size_t other_shared = 0;
    for (const auto& v : categorical_values(dir.file("other.txt"))) other_shared += train.count(v);
    CHECK(other_shared * 20 < test.size());
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

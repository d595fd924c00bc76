// Click metrics: exact AUC (perfect, reversed, constant scorers, ties counted half, a brute-force pair count on
// tied random data) and the clipped mean log loss, against values worked out by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/nn/click_metrics.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;

TEST_CASE("AUC of perfect, reversed and constant scorers", "[nn][metrics]") {
    const std::vector<float> labels{0, 1, 0, 1, 1, 0};
    const std::vector<float> perfect{0.1f, 0.8f, 0.2f, 0.7f, 0.9f, 0.3f};
    std::vector<float> reversed;
    for (float s : perfect) reversed.push_back(-s);
    const std::vector<float> constant(6, 0.4f);
    CHECK(exact_auc(perfect, labels) == 1.0);
    CHECK(exact_auc(reversed, labels) == 0.0);
    CHECK(exact_auc(constant, labels) == 0.5);
}

TEST_CASE("AUC by hand, with ties counted half", "[nn][metrics]") {
    // Positives {0.35, 0.8}, negatives {0.1, 0.4}: pairs (0.35>0.1) (0.35<0.4) (0.8>0.1) (0.8>0.4) -> 3/4.
    CHECK(exact_auc(std::vector<float>{0.1f, 0.4f, 0.35f, 0.8f}, std::vector<float>{0, 0, 1, 1}) == 0.75);
    // Positives {0.5, 0.9}, negatives {0.5, 0.2}: (0.5 = 0.5) half, the other three right -> 3.5/4.
    CHECK(exact_auc(std::vector<float>{0.5f, 0.5f, 0.2f, 0.9f}, std::vector<float>{1, 0, 0, 1}) == 0.875);
    // Three positives and two negatives all tied at one score, plus one positive above: 6 tied pairs count 3,
    // the top positive beats both negatives: (3 + 2) / (4 * 2) = 0.625.
    CHECK(exact_auc(std::vector<float>{1, 1, 1, 1, 1, 2}, std::vector<float>{1, 1, 1, 0, 0, 1}) == 0.625);
}

TEST_CASE("AUC equals the brute-force pair count on tied random scores", "[nn][metrics]") {
    Rng rng(5);
    std::vector<float> scores, labels;
    for (int i = 0; i < 700; ++i) {
        const bool click = rng.uniform() < 0.3f;
        // Few distinct values (many ties), shifted up for clicks so the AUC is well above 0.5.
        scores.push_back(std::floor(rng.uniform() * 8.0f + (click ? 2.0f : 0.0f)));
        labels.push_back(click ? 1.0f : 0.0f);
    }
    double pairs = 0.0, right = 0.0;
    for (size_t i = 0; i < scores.size(); ++i)
        for (size_t j = 0; j < scores.size(); ++j)
            if (labels[i] == 1.0f && labels[j] == 0.0f) {
                pairs += 1.0;
                right += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
            }
    const double auc = exact_auc(scores, labels);
    CHECK(auc == Approx(right / pairs).epsilon(1e-12));
    CHECK(auc > 0.6);
}

TEST_CASE("AUC is undefined with one class and refuses bad input", "[nn][metrics]") {
    CHECK(std::isnan(exact_auc(std::vector<float>{0.1f, 0.2f}, std::vector<float>{1, 1})));
    CHECK(std::isnan(exact_auc(std::vector<float>{}, std::vector<float>{})));
    CHECK_THROWS_WITH(exact_auc(std::vector<float>{0.1f, 0.2f}, std::vector<float>{1, -1}), Catch::Contains("not 0 or 1"));
    CHECK_THROWS_WITH(exact_auc(std::vector<float>{0.1f, NAN}, std::vector<float>{1, 0}), Catch::Contains("NaN"));
    CHECK_THROWS_AS(exact_auc(std::vector<float>{0.1f}, std::vector<float>{1, 0}), Error);
}

TEST_CASE("mean log loss by hand, with its clipping", "[nn][metrics]") {
    // -(ln 0.9 + ln(1 - 0.2)) / 2
    CHECK(mean_log_loss(std::vector<float>{0.9f, 0.2f}, std::vector<float>{1, 0}) ==
          Approx(-(std::log(0.9) + std::log(0.8)) / 2.0).epsilon(1e-6));
    // Certain and right costs 0; certain and wrong costs -ln(1e-15) = 34.5388, not infinity.
    CHECK(mean_log_loss(std::vector<float>{1.0f, 0.0f}, std::vector<float>{1, 0}) == 0.0);
    CHECK(mean_log_loss(std::vector<float>{0.0f}, std::vector<float>{1}) == Approx(34.538776394910684));
    CHECK(mean_log_loss(std::vector<float>{1.0f}, std::vector<float>{0}) == Approx(34.538776394910684));
    CHECK(mean_log_loss(std::vector<float>{0.0f}, std::vector<float>{1}, 1e-7) == Approx(-std::log(1e-7)));
    // The constant predictor at the base rate: the entropy of the labels.
    CHECK(mean_log_loss(std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f}, std::vector<float>{1, 0, 0, 0}) ==
          Approx(-(0.25 * std::log(0.25) + 0.75 * std::log(0.75))));
    CHECK(std::isnan(mean_log_loss(std::vector<float>{}, std::vector<float>{})));
    CHECK_THROWS_WITH(mean_log_loss(std::vector<float>{1.5f}, std::vector<float>{1}), Catch::Contains("not in [0, 1]"));
    CHECK_THROWS_WITH(mean_log_loss(std::vector<float>{0.5f}, std::vector<float>{2}), Catch::Contains("not 0 or 1"));
}

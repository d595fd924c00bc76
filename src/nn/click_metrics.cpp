// Exact AUC and clipped log loss (see the header).
#include "ringtrain/nn/click_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ringtrain/core/error.hpp"

namespace ringtrain::nn {

namespace {

void check_sizes(const char* what, size_t a, size_t b) {
    if (a != b)
        throw Error(std::string(what) + ": " + std::to_string(a) + " predictions but " + std::to_string(b) + " labels");
}

bool positive(float label, size_t i, const char* what) {
    if (label != 0.0f && label != 1.0f)
        throw Error(std::string(what) + ": label " + std::to_string(label) + " of sample " + std::to_string(i) +
                    " is not 0 or 1");
    return label == 1.0f;
}

}  // namespace

double exact_auc(std::span<const float> scores, std::span<const float> labels) {
    check_sizes("AUC", scores.size(), labels.size());
    std::vector<std::pair<float, bool>> s(scores.size());
    for (size_t i = 0; i < scores.size(); ++i) {
        if (std::isnan(scores[i])) throw Error("AUC: score of sample " + std::to_string(i) + " is NaN");
        s[i] = {scores[i], positive(labels[i], i, "AUC")};
    }
    std::sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    // Walk groups of equal scores in ascending order: each positive in a group beats every negative below the
    // group and half-beats the group's negatives.
    double correct = 0.0;
    uint64_t negatives_below = 0, positives = 0;
    for (size_t i = 0; i < s.size();) {
        size_t j = i;
        uint64_t p = 0, n = 0;
        for (; j < s.size() && s[j].first == s[i].first; ++j) (s[j].second ? p : n) += 1;
        correct += static_cast<double>(p) * (static_cast<double>(negatives_below) + 0.5 * static_cast<double>(n));
        negatives_below += n;
        positives += p;
        i = j;
    }
    if (positives == 0 || negatives_below == 0) return std::numeric_limits<double>::quiet_NaN();
    return correct / (static_cast<double>(positives) * static_cast<double>(negatives_below));
}

double mean_log_loss(std::span<const float> probabilities, std::span<const float> labels, double eps) {
    check_sizes("log loss", probabilities.size(), labels.size());
    if (probabilities.empty()) return std::numeric_limits<double>::quiet_NaN();
    double sum = 0.0;
    for (size_t i = 0; i < probabilities.size(); ++i) {
        const float p = probabilities[i];
        if (!(p >= 0.0f && p <= 1.0f))
            throw Error("log loss: probability " + std::to_string(p) + " of sample " + std::to_string(i) +
                        " is not in [0, 1]");
        const double own = positive(labels[i], i, "log loss") ? static_cast<double>(p) : 1.0 - static_cast<double>(p);
        sum -= std::log(std::max(own, eps));
    }
    return sum / static_cast<double>(probabilities.size());
}

}  // namespace ringtrain::nn

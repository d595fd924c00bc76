// Metrics of click prediction (binary labels 0/1), computed over a whole test set (all ranks' scores gathered):
//   exact_auc:     the area under the ROC curve, exactly: the Mann-Whitney statistic, the share of (positive,
//                  negative) pairs the score orders correctly, a tie counting half (= the rank-sum formula with
//                  average ranks for ties). Any score monotone in the click probability gives the same AUC (logits
//                  or probabilities). O(n log n), no binning.
//   mean_log_loss: -mean(y ln p + (1-y) ln(1-p)), each sample's probability of its own label clipped below at
//                  eps (default 1e-15, scikit-learn's), so a confidently wrong prediction costs at most -ln(eps) =
//                  34.54 instead of infinity. Summed in double.
#pragma once

#include <span>

namespace ringtrain::nn {

// NaN when the labels hold only one class (AUC is undefined then). Error for a label other than 0 or 1, a NaN
// score, or spans of different lengths.
double exact_auc(std::span<const float> scores, std::span<const float> labels);

// probabilities of a click, in [0, 1]. NaN for empty input. Error for a label other than 0 or 1, a probability
// outside [0, 1] (or NaN), or spans of different lengths.
double mean_log_loss(std::span<const float> probabilities, std::span<const float> labels, double eps = 1e-15);

}  // namespace ringtrain::nn

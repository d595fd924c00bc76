#include "ringtrain/nn/loss.hpp"

#include "ringtrain/core/error.hpp"

namespace ringtrain::nn {

ops::LossStats SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels) {
    probs_.resize(logits.shape(), logits.device());
    return ops::softmax_cross_entropy_forward(logits, labels, probs_);
}

void SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels, ops::LossTotals& totals) {
    probs_.resize(logits.shape(), logits.device());
    ops::softmax_cross_entropy_forward(logits, labels, probs_, totals);
}

void SoftmaxCrossEntropy::backward(const Tensor& labels, float scale, Tensor& dlogits) {
    dlogits.resize(probs_.shape(), probs_.device());
    ops::softmax_cross_entropy_backward(probs_, labels, dlogits, scale);
}

ops::LossStats SigmoidBinaryCrossEntropy::forward(const Tensor& logits, const Tensor& labels) {
    probs_.resize(logits.shape(), logits.device());
    return ops::sigmoid_bce_forward(logits, labels, probs_);
}

void SigmoidBinaryCrossEntropy::forward(const Tensor& logits, const Tensor& labels, ops::LossTotals& totals) {
    probs_.resize(logits.shape(), logits.device());
    ops::sigmoid_bce_forward(logits, labels, probs_, totals);
}

void SigmoidBinaryCrossEntropy::backward(const Tensor& labels, float scale, Tensor& dlogits) {
    dlogits.resize(probs_.shape(), probs_.device());
    ops::sigmoid_bce_backward(probs_, labels, dlogits, scale);
}

std::unique_ptr<Loss> make_loss(const std::string& name) {
    if (name == "softmax_cross_entropy") return std::make_unique<SoftmaxCrossEntropy>();
    if (name == "sigmoid_bce") return std::make_unique<SigmoidBinaryCrossEntropy>();
    throw InputError("unknown loss '" + name + "'; use softmax_cross_entropy or sigmoid_bce");
}

}  // namespace ringtrain::nn

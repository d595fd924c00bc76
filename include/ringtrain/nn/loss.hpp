// Losses turn logits and labels into a loss value and the gradient w.r.t. the logits.
// Softmax cross-entropy for multi-class models, sigmoid binary cross-entropy for one-logit models.
#pragma once

#include <memory>
#include <string>

#include "ringtrain/ops/ops.hpp"

namespace ringtrain::nn {

class Loss {
public:
    virtual ~Loss() = default;
    virtual std::string type() const = 0;
    // Sum of per-sample losses and number of correct predictions in the batch.
    virtual ops::LossStats forward(const Tensor& logits, const Tensor& labels) = 0;
    // The same, added into `totals` on the logits' device (no host round trip on a GPU; see ops::LossTotals).
    virtual void forward(const Tensor& logits, const Tensor& labels, ops::LossTotals& totals) = 0;
    // dlogits of (scale * summed loss); call after forward with the same inputs.
    virtual void backward(const Tensor& labels, float scale, Tensor& dlogits) = 0;
};

class SoftmaxCrossEntropy : public Loss {
public:
    std::string type() const override { return "softmax_cross_entropy"; }
    ops::LossStats forward(const Tensor& logits, const Tensor& labels) override;
    void forward(const Tensor& logits, const Tensor& labels, ops::LossTotals& totals) override;
    void backward(const Tensor& labels, float scale, Tensor& dlogits) override;

private:
    Tensor probs_;
};

class SigmoidBinaryCrossEntropy : public Loss {
public:
    std::string type() const override { return "sigmoid_bce"; }
    ops::LossStats forward(const Tensor& logits, const Tensor& labels) override;
    void forward(const Tensor& logits, const Tensor& labels, ops::LossTotals& totals) override;
    void backward(const Tensor& labels, float scale, Tensor& dlogits) override;

private:
    Tensor probs_;
};

// "softmax_cross_entropy" or "sigmoid_bce"; InputError otherwise.
std::unique_ptr<Loss> make_loss(const std::string& name);

}  // namespace ringtrain::nn

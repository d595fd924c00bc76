// Dispatch for activations, dropout and losses.
#include <cmath>

#include "dispatch.hpp"
#include "ringtrain/ops/ops.hpp"

namespace ringtrain::ops {

using detail::require;

void activation_forward(Activation a, const Tensor& x, Tensor& y) {
    require(x.numel() == y.numel(), "activation_forward", "x and y must have the same number of elements",
            {{"x", &x}, {"y", &y}});
    RT_DISPATCH(detail::device_of("activation_forward", {&x, &y}), activation_forward, a, x, y);
}

void activation_backward(Activation a, const Tensor& y, const Tensor& dy, Tensor& dx) {
    require(y.numel() == dy.numel() && dx.numel() == y.numel(), "activation_backward",
            "y, dy and dx must have the same number of elements", {{"y", &y}, {"dy", &dy}, {"dx", &dx}});
    RT_DISPATCH(detail::device_of("activation_backward", {&y, &dy, &dx}), activation_backward, a, y, dy, dx);
}

void dropout_forward(const Tensor& x, Tensor& y, Tensor& mask, float p, Rng& rng) {
    if (!(p >= 0.0f && p < 1.0f))
        throw InputError("dropout probability must be in [0, 1), got " + std::to_string(p));
    require(x.numel() == y.numel() && x.numel() == mask.numel(), "dropout_forward",
            "x, y and mask must have the same number of elements", {{"x", &x}, {"y", &y}, {"mask", &mask}});
    RT_DISPATCH(detail::device_of("dropout_forward", {&x, &y, &mask}), dropout_forward, x, y, mask, p, rng);
}

void dropout_backward(const Tensor& dy, const Tensor& mask, Tensor& dx) {
    require(dy.numel() == mask.numel() && dx.numel() == dy.numel(), "dropout_backward",
            "dy, mask and dx must have the same number of elements", {{"dy", &dy}, {"mask", &mask}, {"dx", &dx}});
    RT_DISPATCH(detail::device_of("dropout_backward", {&dy, &mask, &dx}), dropout_backward, dy, mask, dx);
}

namespace {
void require_softmax_ce_forward(const Tensor& logits, const Tensor& labels, const Tensor& probs) {
    require(logits.ndim() == 2 && labels.numel() == logits.dim(0) && probs.shape() == logits.shape(),
            "softmax_cross_entropy_forward", "logits must be [N,K], labels [N] and probs [N,K]",
            {{"logits", &logits}, {"labels", &labels}, {"probs", &probs}});
}
}  // namespace

LossStats softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs) {
    require_softmax_ce_forward(logits, labels, probs);
    RT_DISPATCH(detail::device_of("softmax_cross_entropy_forward", {&logits, &labels, &probs}),
                softmax_cross_entropy_forward, logits, labels, probs);
}

void softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, Tensor& dlogits, float scale) {
    require(probs.ndim() == 2 && labels.numel() == probs.dim(0) && dlogits.shape() == probs.shape(),
            "softmax_cross_entropy_backward", "probs must be [N,K], labels [N] and dlogits [N,K]",
            {{"probs", &probs}, {"labels", &labels}, {"dlogits", &dlogits}});
    RT_DISPATCH(detail::device_of("softmax_cross_entropy_backward", {&probs, &labels, &dlogits}),
                softmax_cross_entropy_backward, probs, labels, dlogits, scale);
}

namespace {
bool is_binary_logits(const Tensor& t) { return t.ndim() == 1 || (t.ndim() == 2 && t.dim(1) == 1); }

void require_sigmoid_bce_forward(const Tensor& logits, const Tensor& targets, const Tensor& probs) {
    require(is_binary_logits(logits) && targets.numel() == logits.numel() && probs.numel() == logits.numel(),
            "sigmoid_bce_forward", "logits must be [N] or [N,1], targets [N] and probs like logits",
            {{"logits", &logits}, {"targets", &targets}, {"probs", &probs}});
}
}  // namespace

LossStats sigmoid_bce_forward(const Tensor& logits, const Tensor& targets, Tensor& probs) {
    require_sigmoid_bce_forward(logits, targets, probs);
    RT_DISPATCH(detail::device_of("sigmoid_bce_forward", {&logits, &targets, &probs}), sigmoid_bce_forward, logits,
                targets, probs);
}

// The accumulating forms: on the CPU the plain op, added on the host; on a GPU the kernel adds into the device record.
void softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs, LossTotals& totals) {
    require_softmax_ce_forward(logits, labels, probs);
    const Device dev = detail::device_of("softmax_cross_entropy_forward", {&logits, &labels, &probs});
    if (dev == Device::CPU) return totals.add(cpu::softmax_cross_entropy_forward(logits, labels, probs));
#ifdef RINGTRAIN_WITH_CUDA
    cuda::softmax_cross_entropy_accumulate(
        logits, labels, probs,
        totals.device_totals(dev, "softmax cross-entropy: a label is not a class index in [0, " +
                                      std::to_string(logits.dim(1)) + ")"));
#else
    detail::throw_no_cuda("softmax_cross_entropy_forward");
#endif
}

void sigmoid_bce_forward(const Tensor& logits, const Tensor& targets, Tensor& probs, LossTotals& totals) {
    require_sigmoid_bce_forward(logits, targets, probs);
    const Device dev = detail::device_of("sigmoid_bce_forward", {&logits, &targets, &probs});
    if (dev == Device::CPU) return totals.add(cpu::sigmoid_bce_forward(logits, targets, probs));
#ifdef RINGTRAIN_WITH_CUDA
    cuda::sigmoid_bce_accumulate(logits, targets, probs,
                                 totals.device_totals(dev, "binary cross-entropy: a target is not in [0, 1]"));
#else
    detail::throw_no_cuda("sigmoid_bce_forward");
#endif
}

void sigmoid_bce_backward(const Tensor& probs, const Tensor& targets, Tensor& dlogits, float scale) {
    require(is_binary_logits(probs) && targets.numel() == probs.numel() && dlogits.numel() == probs.numel(),
            "sigmoid_bce_backward", "probs must be [N] or [N,1], targets [N] and dlogits like probs",
            {{"probs", &probs}, {"targets", &targets}, {"dlogits", &dlogits}});
    RT_DISPATCH(detail::device_of("sigmoid_bce_backward", {&probs, &targets, &dlogits}), sigmoid_bce_backward, probs,
                targets, dlogits, scale);
}

}  // namespace ringtrain::ops

// CUDA ops on own kernels (kernels.cu): activations, dropout, bias, vector ops, losses, optimizer updates.
#include <cmath>
#include <string>

#include "cuda_ops.hpp"
#include "kernels.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"

namespace ringtrain::ops::cuda {

namespace {

size_t n_of(const Tensor& t) { return static_cast<size_t>(t.numel()); }

void launched(int status, const char* kernel) { cuda_check(status, kernel); }

int64_t spatial(const Tensor& t) {
    int64_t s = 1;
    for (size_t i = 2; i < t.ndim(); ++i) s *= t.dim(i);
    return s;
}

// A small device buffer for one ReduceResult, reused (from the caching allocator), and its host copy.
struct DeviceResult {
    std::shared_ptr<float> storage = allocate_floats(8, Device::CUDA);
    kernels::ReduceResult* get() { return reinterpret_cast<kernels::ReduceResult*>(storage.get()); }
    kernels::ReduceResult fetch() {
        kernels::ReduceResult r{};
        copy_floats(reinterpret_cast<float*>(&r), Device::CPU, storage.get(), Device::CUDA,
                    sizeof(r) / sizeof(float));
        return r;
    }
};

DeviceResult started_result() {
    DeviceResult r;
    launched(kernels::reset_result(r.get()), "reset kernel");
    return r;
}

int act_code(Activation a) {
    switch (a) {
        case Activation::ReLU: return 0;
        case Activation::Sigmoid: return 1;
        case Activation::Tanh: return 2;
    }
    return 0;
}

}  // namespace

void activation_forward(Activation a, const Tensor& x, Tensor& y) {
    launched(kernels::activation_forward(act_code(a), x.data(), y.data(), n_of(x)), "activation_forward kernel");
}

void activation_backward(Activation a, const Tensor& y, const Tensor& dy, Tensor& dx) {
    launched(kernels::activation_backward(act_code(a), y.data(), dy.data(), dx.data(), n_of(y)),
             "activation_backward kernel");
}

void dropout_forward(const Tensor& x, Tensor& y, Tensor& mask, float p, Rng& rng) {
    if (x.empty()) return;
    const uint64_t seed = rng.next_u64();
    launched(kernels::dropout_forward(x.data(), y.data(), mask.data(), n_of(x), p, seed), "dropout_forward kernel");
}

void dropout_backward(const Tensor& dy, const Tensor& mask, Tensor& dx) {
    launched(kernels::multiply(dy.data(), mask.data(), dx.data(), n_of(dy)), "dropout_backward kernel");
}

void bias_add(Tensor& y, const Tensor& bias) {
    if (y.empty()) return;
    launched(kernels::bias_add(y.data(), bias.data(), y.dim(0), y.dim(1), spatial(y)), "bias_add kernel");
}

void bias_grad(const Tensor& dy, Tensor& dbias, bool accumulate) {
    if (dbias.empty()) return;
    if (dy.dim(0) == 0) {
        if (!accumulate) dbias.zero();
        return;
    }
    // Scratch from the caching allocator: freed after the launch, reused only by later work on the same stream.
    const auto scratch = allocate_floats(kernels::bias_grad_scratch_floats(dy.dim(0), dy.dim(1), spatial(dy)),
                                         Device::CUDA);
    launched(kernels::bias_grad(dy.data(), dbias.data(), dy.dim(0), dy.dim(1), spatial(dy), accumulate, scratch.get()),
             "bias_grad kernel");
}

void scale(Tensor& x, float alpha) {
    if (!x.empty()) launched(kernels::scale(x.data(), alpha, n_of(x)), "scale kernel");
}

void axpy(float alpha, const Tensor& x, Tensor& y) {
    if (!x.empty()) launched(kernels::axpy(alpha, x.data(), y.data(), n_of(x)), "axpy kernel");
}

bool all_finite(const Tensor& x) {
    if (x.empty()) return true;
    DeviceResult r = started_result();
    launched(kernels::sum_squares_and_nonfinite(x.data(), n_of(x), r.get(), false), "all_finite kernel");
    return r.fetch().count == 0;
}

double sum_squares(const Tensor& x) {
    if (x.empty()) return 0.0;
    DeviceResult r = started_result();
    launched(kernels::sum_squares_and_nonfinite(x.data(), n_of(x), r.get(), true), "sum_squares kernel");
    return r.fetch().sum;
}

LossStats softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs) {
    const int64_t N = logits.dim(0), K = logits.dim(1);
    if (N == 0) return {};
    DeviceResult r = started_result();
    launched(kernels::softmax_ce_forward(logits.data(), labels.data(), probs.data(), N, K, r.get()),
             "softmax_cross_entropy_forward kernel");
    const kernels::ReduceResult h = r.fetch();
    if (h.first_bad != ~0ull) {
        float label = 0.0f;
        copy_floats(&label, Device::CPU, labels.data() + h.first_bad, Device::CUDA, 1);
        throw InputError("softmax cross-entropy: label " + std::to_string(label) + " of sample " +
                         std::to_string(h.first_bad) + " is not a class index in [0, " + std::to_string(K) + ")");
    }
    return {h.sum, static_cast<int64_t>(h.count)};
}

void softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, Tensor& dlogits, float scale) {
    if (probs.empty()) return;
    launched(kernels::softmax_ce_backward(probs.data(), labels.data(), dlogits.data(), probs.dim(0), probs.dim(1),
                                          scale),
             "softmax_cross_entropy_backward kernel");
}

LossStats sigmoid_bce_forward(const Tensor& logits, const Tensor& targets, Tensor& probs) {
    const int64_t N = logits.numel();
    if (N == 0) return {};
    DeviceResult r = started_result();
    launched(kernels::sigmoid_bce_forward(logits.data(), targets.data(), probs.data(), N, r.get()),
             "sigmoid_bce_forward kernel");
    const kernels::ReduceResult h = r.fetch();
    if (h.first_bad != ~0ull) {
        float t = 0.0f;
        copy_floats(&t, Device::CPU, targets.data() + h.first_bad, Device::CUDA, 1);
        throw InputError("binary cross-entropy: target " + std::to_string(t) + " of sample " +
                         std::to_string(h.first_bad) + " is not in [0, 1]");
    }
    return {h.sum, static_cast<int64_t>(h.count)};
}

void sigmoid_bce_backward(const Tensor& probs, const Tensor& targets, Tensor& dlogits, float scale) {
    if (probs.empty()) return;
    launched(kernels::sigmoid_bce_backward(probs.data(), targets.data(), dlogits.data(), probs.numel(), scale),
             "sigmoid_bce_backward kernel");
}

void softmax_cross_entropy_accumulate(const Tensor& logits, const Tensor& labels, Tensor& probs, float* totals) {
    if (logits.dim(0) == 0) return;
    launched(kernels::softmax_ce_forward(logits.data(), labels.data(), probs.data(), logits.dim(0), logits.dim(1),
                                         reinterpret_cast<kernels::ReduceResult*>(totals)),
             "softmax_cross_entropy_forward kernel");
}

void sigmoid_bce_accumulate(const Tensor& logits, const Tensor& targets, Tensor& probs, float* totals) {
    if (logits.numel() == 0) return;
    launched(kernels::sigmoid_bce_forward(logits.data(), targets.data(), probs.data(), logits.numel(),
                                          reinterpret_cast<kernels::ReduceResult*>(totals)),
             "sigmoid_bce_forward kernel");
}

void sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, const SgdParams& p) {
    if (param.empty()) return;
    launched(kernels::sgd_update(param.data(), grad.data(), p.momentum == 0.0f ? nullptr : velocity.data(),
                                 n_of(param), p.lr, p.momentum, p.weight_decay, p.nesterov),
             "sgd_update kernel");
}

void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p) {
    if (param.empty()) return;
    const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
    launched(kernels::adam_update(param.data(), grad.data(), m.data(), v.data(), n_of(param),
                                  static_cast<float>(p.lr / bc1), static_cast<float>(std::sqrt(bc2)), p.beta1,
                                  p.beta2, p.eps, p.weight_decay),
             "adam_update kernel");
}

void adadelta_update(Tensor& param, const Tensor& grad, Tensor& sq_avg, Tensor& acc_delta, const AdadeltaParams& p) {
    if (param.empty()) return;
    launched(kernels::adadelta_update(param.data(), grad.data(), sq_avg.data(), acc_delta.data(), n_of(param), p.lr,
                                      p.rho, p.eps, p.weight_decay),
             "adadelta_update kernel");
}

}  // namespace ringtrain::ops::cuda

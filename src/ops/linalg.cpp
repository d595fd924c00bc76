// Dispatch for GEMM, bias, vector and optimizer ops.
#include "dispatch.hpp"
#include "ringtrain/ops/cpu_conv.hpp"
#include "ringtrain/ops/ops.hpp"
#ifdef RINGTRAIN_WITH_ONEDNN
#include "cpu/onednn_matmul.hpp"
#endif

namespace ringtrain::ops {

using detail::require;

namespace {
// The inner length k of op(a) op(b), after checking that the shapes fit and c aliases neither input.
int64_t checked_gemm_inner(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c) {
    const auto shapes = {std::pair<const char*, const Tensor*>{"a", &a}, {"b", &b}, {"c", &c}};
    require(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2, "gemm", "a, b and c must be 2-D", shapes);
    const int64_t m = trans_a ? a.dim(1) : a.dim(0), k = trans_a ? a.dim(0) : a.dim(1);
    const int64_t kb = trans_b ? b.dim(1) : b.dim(0), n = trans_b ? b.dim(0) : b.dim(1);
    require(k == kb, "gemm",
            std::string("inner dimensions differ (trans_a=") + (trans_a ? "1" : "0") + " trans_b=" +
                (trans_b ? "1" : "0") + ")",
            shapes);
    require(c.dim(0) == m && c.dim(1) == n, "gemm", "c must have shape [" + std::to_string(m) + "," +
                                                        std::to_string(n) + "]",
            shapes);
    require(c.data() != a.data() && c.data() != b.data(), "gemm", "c must not alias a or b", shapes);
    return k;
}
}  // namespace

void open_device_libraries(Device dev) {
    if (dev == Device::CPU) return;
#ifdef RINGTRAIN_WITH_CUDA
    cuda::open_device_libraries();
#else
    detail::throw_no_cuda("open_device_libraries");
#endif
}

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta) {
    checked_gemm_inner(a, trans_a, b, trans_b, c);
    RT_DISPATCH(detail::device_of("gemm", {&a, &b, &c}), gemm, a, trans_a, b, trans_b, c, alpha, beta);
}

void layer_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta,
                Workspace& ws) {
    const int64_t k = checked_gemm_inner(a, trans_a, b, trans_b, c);
    const Device dev = detail::device_of("gemm", {&a, &b, &c});
#ifdef RINGTRAIN_WITH_ONEDNN
    if ((beta == 0.0f || beta == 1.0f) && dev == Device::CPU) {
        const bool bf16 = gemm_runs_bf16(c.dim(0), k, c.dim(1));
        if (bf16 || gemm_uses_onednn(c.dim(0), k, c.dim(1)))
            return cpu::onednn::gemm(a, trans_a, b, trans_b, c, alpha, beta, bf16, ws);
    }
#endif
    (void)k;
    (void)ws;
    RT_DISPATCH(dev, gemm, a, trans_a, b, trans_b, c, alpha, beta);  // checked above: not again through gemm()
}

void bias_add(Tensor& y, const Tensor& bias) {
    require(y.ndim() >= 2 && bias.ndim() == 1 && bias.dim(0) == y.dim(1), "bias_add",
            "y must be [N, K, ...] and bias [K]", {{"y", &y}, {"bias", &bias}});
    RT_DISPATCH(detail::device_of("bias_add", {&y, &bias}), bias_add, y, bias);
}

void bias_grad(const Tensor& dy, Tensor& dbias, bool accumulate) {
    require(dy.ndim() >= 2 && dbias.ndim() == 1 && dbias.dim(0) == dy.dim(1), "bias_grad",
            "dy must be [N, K, ...] and dbias [K]", {{"dy", &dy}, {"dbias", &dbias}});
    RT_DISPATCH(detail::device_of("bias_grad", {&dy, &dbias}), bias_grad, dy, dbias, accumulate);
}

void scale(Tensor& x, float alpha) { RT_DISPATCH(detail::device_of("scale", {&x}), scale, x, alpha); }

void axpy(float alpha, const Tensor& x, Tensor& y) {
    require(x.numel() == y.numel(), "axpy", "x and y must have the same number of elements", {{"x", &x}, {"y", &y}});
    RT_DISPATCH(detail::device_of("axpy", {&x, &y}), axpy, alpha, x, y);
}

bool all_finite(const Tensor& x) { RT_DISPATCH(detail::device_of("all_finite", {&x}), all_finite, x); }

double sum_squares(const Tensor& x) { RT_DISPATCH(detail::device_of("sum_squares", {&x}), sum_squares, x); }

void sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, const SgdParams& p) {
    require(grad.numel() == param.numel() && (p.momentum == 0.0f || velocity.numel() == param.numel()),
            "sgd_update", "grad (and velocity when momentum != 0) must match param",
            {{"param", &param}, {"grad", &grad}, {"velocity", &velocity}});
    RT_DISPATCH(detail::device_of("sgd_update", {&param, &grad, &velocity}), sgd_update, param, grad, velocity, p);
}

void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p) {
    require(grad.numel() == param.numel() && m.numel() == param.numel() && v.numel() == param.numel(), "adam_update",
            "grad, m and v must match param", {{"param", &param}, {"grad", &grad}, {"m", &m}, {"v", &v}});
    require(p.step >= 1, "adam_update", "step must be >= 1 (got " + std::to_string(p.step) + ")", {{"param", &param}});
    RT_DISPATCH(detail::device_of("adam_update", {&param, &grad, &m, &v}), adam_update, param, grad, m, v, p);
}

void adadelta_update(Tensor& param, const Tensor& grad, Tensor& sq_avg, Tensor& acc_delta, const AdadeltaParams& p) {
    require(grad.numel() == param.numel() && sq_avg.numel() == param.numel() && acc_delta.numel() == param.numel(),
            "adadelta_update", "grad, sq_avg and acc_delta must match param",
            {{"param", &param}, {"grad", &grad}, {"sq_avg", &sq_avg}, {"acc_delta", &acc_delta}});
    RT_DISPATCH(detail::device_of("adadelta_update", {&param, &grad, &sq_avg, &acc_delta}), adadelta_update, param,
                grad, sq_avg, acc_delta, p);
}

}  // namespace ringtrain::ops

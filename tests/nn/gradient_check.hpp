// Finite-difference gradient checker for nn::Layer (in the style of Caffe's GradientChecker).
//
// For a built layer, an input x and a random upstream gradient dy, the scalar L = sum(y * dy) has
// dL/dx = dx and dL/dparam = param.grad as computed by Layer::backward. Each input and parameter element is
// perturbed by +-eps, the float forward pass is rerun, L is accumulated in double and the central difference
// (L+ - L-) / (2 eps) is compared with the analytic value:
//     |analytic - numeric| <= abs_tol + rel_tol * max(|analytic|, |numeric|).
// Kinks (ReLU at 0, ties in a max-pool window) make central differences meaningless, so callers build inputs
// that keep every value at least 2*eps away from them (away_from_zero, distinct_values below).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "ringtrain/core/rng.hpp"
#include "ringtrain/core/tensor.hpp"
#include "ringtrain/nn/layer.hpp"

namespace gradcheck {

using ringtrain::Rng;
using ringtrain::Shape;
using ringtrain::Tensor;

struct Options {
    double eps = 1e-2;
    double rel_tol = 1e-2;
    double abs_tol = 1e-3;
    bool check_input = true;   // compare dx (layers whose input gradient matters)
    bool training = false;     // ForwardContext::training
    uint64_t ctx_seed = 1234;  // each forward pass gets a fresh Rng(ctx_seed): stochastic layers draw the same mask
    uint64_t dy_seed = 99;     // seed of the random upstream gradient
};

struct Report {
    int64_t checked = 0;
    int64_t failed = 0;
    double worst = 0.0;  // max |a - n| / (abs_tol + rel_tol * max(|a|, |n|)); <= 1 passes
    std::string first_failures;
    bool ok() const { return checked > 0 && failed == 0; }
};

// ---- inputs ------------------------------------------------------------------------------------------

inline Tensor random_tensor(Shape shape, Rng& rng, float lo = -1.0f, float hi = 1.0f) {
    Tensor t(std::move(shape));
    for (float& v : t.span()) v = rng.uniform(lo, hi);
    return t;
}

// Uniform in [-hi, hi] but rejecting |v| < margin (keeps ReLU inputs off the kink).
inline Tensor away_from_zero(Shape shape, Rng& rng, float margin, float hi = 1.0f) {
    Tensor t(std::move(shape));
    for (float& v : t.span()) {
        do v = rng.uniform(-hi, hi);
        while (std::fabs(v) < margin);
    }
    return t;
}

// A random permutation of evenly spaced values (spacing apart, centred on 0): no two elements are within
// `spacing` of each other, so a perturbation of eps < spacing/2 never changes which element wins a max.
inline Tensor distinct_values(Shape shape, Rng& rng, float spacing) {
    Tensor t(std::move(shape));
    const int64_t n = t.numel();
    std::vector<int64_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    for (int64_t i = n - 1; i > 0; --i) std::swap(idx[i], idx[rng.below(static_cast<uint64_t>(i + 1))]);
    for (int64_t i = 0; i < n; ++i) t.data()[i] = spacing * (static_cast<float>(idx[i]) - 0.5f * static_cast<float>(n));
    return t;
}

inline double dot(const Tensor& a, const Tensor& b) {
    REQUIRE(a.numel() == b.numel());
    double s = 0.0;
    for (int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a.data()[i]) * static_cast<double>(b.data()[i]);
    return s;
}

// Compares one analytic value with one numeric estimate, recording failures in the report.
inline void compare(Report& r, const Options& o, const std::string& what, int64_t index, double analytic,
                    double numeric) {
    const double scale = o.abs_tol + o.rel_tol * std::max(std::fabs(analytic), std::fabs(numeric));
    const double v = std::fabs(analytic - numeric) / scale;
    ++r.checked;
    if (!(v <= r.worst)) r.worst = v;  // NaN becomes the worst
    if (!(v <= 1.0)) {
        if (r.failed < 8) {
            std::ostringstream os;
            os << "  " << what << "[" << index << "]: analytic " << analytic << " numeric " << numeric << "\n";
            r.first_failures += os.str();
        }
        ++r.failed;
    }
}

// Central difference of `loss` with respect to every element of `t` (perturbed in place and restored).
inline std::vector<double> numeric_gradient(Tensor& t, double eps, const std::function<double()>& loss) {
    std::vector<double> g(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) {
        const float orig = t.data()[i];
        t.data()[i] = static_cast<float>(orig + eps);
        const double lp = loss();
        t.data()[i] = static_cast<float>(orig - eps);
        const double lm = loss();
        t.data()[i] = orig;
        // The float perturbation is not exactly eps; divide by the step actually taken.
        const double step = static_cast<double>(static_cast<float>(orig + eps)) -
                            static_cast<double>(static_cast<float>(orig - eps));
        g[static_cast<size_t>(i)] = (lp - lm) / step;
    }
    return g;
}

// Checks dx and every parameter gradient of a built layer at input x (x is perturbed and restored).
inline Report check_layer(ringtrain::nn::Layer& layer, Tensor& x, const Options& o = {}) {
    auto run_forward = [&](Tensor& y) {
        Rng ctx_rng(o.ctx_seed);
        ringtrain::nn::ForwardContext ctx{o.training, &ctx_rng};
        layer.forward(x, y, ctx);
    };
    Tensor y;
    run_forward(y);
    Rng dy_rng(o.dy_seed);
    Tensor dy = random_tensor(y.shape(), dy_rng);

    Tensor dx;
    layer.backward(x, y, dy, &dx, false);
    REQUIRE(dx.shape() == x.shape());
    const Tensor dx_analytic = dx.clone();
    std::vector<Tensor> grads;
    for (auto* p : layer.parameters()) {
        REQUIRE(p->grad.shape() == p->value.shape());
        grads.push_back(p->grad.clone());
    }

    Tensor y_tmp;
    auto loss = [&]() {
        run_forward(y_tmp);
        return dot(y_tmp, dy);
    };
    Report r;
    if (o.check_input) {
        const auto num = numeric_gradient(x, o.eps, loss);
        for (int64_t i = 0; i < x.numel(); ++i) compare(r, o, "dx", i, dx_analytic.data()[i], num[i]);
    }
    const auto params = layer.parameters();
    for (size_t k = 0; k < params.size(); ++k) {
        const auto num = numeric_gradient(params[k]->value, o.eps, loss);
        for (int64_t i = 0; i < grads[k].numel(); ++i)
            compare(r, o, params[k]->name.empty() ? "param" + std::to_string(k) : params[k]->name, i,
                    grads[k].data()[i], num[i]);
    }
    return r;
}

// Builds `layer` for one sample of shape `sample` with a seeded Rng (naming it for readable failures).
inline void build(ringtrain::nn::Layer& layer, const Shape& sample, uint64_t seed = 7,
                  const std::string& name = "layer") {
    layer.set_name(name);
    Rng rng(seed);
    layer.build(sample, rng);
}

inline Shape batched(int64_t n, const Shape& sample) {
    Shape s{n};
    s.insert(s.end(), sample.begin(), sample.end());
    return s;
}

}  // namespace gradcheck

#define REQUIRE_GRADIENTS_OK(report)                                                                       \
    do {                                                                                                   \
        const gradcheck::Report& rep_ = (report);                                                          \
        INFO("checked " << rep_.checked << ", failed " << rep_.failed << ", worst " << rep_.worst << "\n" \
                        << rep_.first_failures);                                                           \
        REQUIRE(rep_.ok());                                                                                \
    } while (0)

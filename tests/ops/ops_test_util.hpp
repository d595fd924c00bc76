// Helpers shared by the op tests: random tensors and tolerant comparisons.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "ringtrain/core/rng.hpp"
#include "ringtrain/core/tensor.hpp"

namespace ops_test {

inline ringtrain::Tensor random_tensor(ringtrain::Shape shape, ringtrain::Rng& rng, float lo = -1.0f, float hi = 1.0f) {
    ringtrain::Tensor t(std::move(shape));
    for (float& v : t.span()) v = rng.uniform(lo, hi);
    return t;
}

inline std::vector<double> to_double(const ringtrain::Tensor& t) { return {t.span().begin(), t.span().end()}; }

// Max over elements of |a - b| / (abs_tol + rel_tol * |b|); <= 1 means every element is within tolerance.
inline double max_violation(const ringtrain::Tensor& a, const std::vector<double>& b, double abs_tol, double rel_tol) {
    REQUIRE(static_cast<size_t>(a.numel()) == b.size());
    double worst = 0.0;
    for (size_t i = 0; i < b.size(); ++i) {
        const double d = std::fabs(static_cast<double>(a.data()[i]) - b[i]) / (abs_tol + rel_tol * std::fabs(b[i]));
        if (!(d <= worst)) worst = d;  // NaN propagates as a failure
    }
    return worst;
}

#define REQUIRE_CLOSE(actual, expected, abs_tol, rel_tol) \
    REQUIRE(ops_test::max_violation((actual), (expected), (abs_tol), (rel_tol)) <= 1.0)

}  // namespace ops_test

// SparseLinear (see the header): embedding-bag forward, merged sparse backward.
#include "ringtrain/nn/sparse_linear.hpp"

#include <algorithm>
#include <bit>
#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"

namespace ringtrain::nn {

SparseLinear::SparseLinear(std::string name, int64_t num_features, int64_t out_features)
    : name_(std::move(name)), num_features_(num_features), out_(out_features) {
    if (num_features <= 0 || out_features <= 0)
        throw Error("sparse layer " + name_ + ": needs a positive feature count and out_features (got " +
                    std::to_string(num_features) + " and " + std::to_string(out_features) + ")");
    if (num_features > (int64_t{1} << 32))
        throw Error("sparse layer " + name_ + ": " + std::to_string(num_features) + " features do not fit 32-bit ids");
    weight_ = {name_ + ".weight", Tensor::zeros({num_features, out_features}), Tensor()};
    bias_ = {name_ + ".bias", Tensor::zeros({out_features}), Tensor()};
}

void SparseLinear::check_index(uint32_t index) const {
    if (static_cast<int64_t>(index) >= num_features_)
        throw Error("sparse layer " + name_ + ": feature " + std::to_string(index) + " is past its " +
                    std::to_string(num_features_) + " features");
}

void SparseLinear::forward(const CsrBatch& batch, float* logits) const {
    const int64_t K = out_;
    const float* W = weight_.value.data();
    const float* b = bias_.value.data();
    for (int64_t r = 0; r < batch.rows(); ++r) {
        const auto idx = batch.row_indices(r);
        const auto val = batch.row_values(r);
        float* out = logits + r * K;
        if (K == 1) {  // logistic regression: one dot product, kept in a register
            float z = b[0];
            for (size_t j = 0; j < idx.size(); ++j) {
                check_index(idx[j]);
                z += val[j] * W[idx[j]];
            }
            out[0] = z;
            continue;
        }
        std::copy_n(b, K, out);
        for (size_t j = 0; j < idx.size(); ++j) {
            check_index(idx[j]);
            const float v = val[j];
            const float* w = W + static_cast<int64_t>(idx[j]) * K;
            for (int64_t k = 0; k < K; ++k) out[k] += v * w[k];
        }
    }
}

void SparseLinear::forward(const CsrBatch& batch, Tensor& logits) const {
    logits.resize({batch.rows(), out_});
    forward(batch, logits.data());
}

void SparseLinear::backward(const CsrBatch& batch, const float* dlogits, SparseRows& grad, std::span<float> bias_grad) {
    const int64_t K = out_;
    if (static_cast<int64_t>(bias_grad.size()) != K)
        throw Error("sparse layer " + name_ + ": bias gradient has " + std::to_string(bias_grad.size()) +
                    " values, the layer " + std::to_string(K) + " outputs");
    if (slot_.empty()) slot_.assign(static_cast<size_t>(num_features_), -1);
    grad.width = K;
    grad.clear();

    // 1. The touched rows, each once (slot_ marks them), then in ascending order: sorting the u touched ids when
    //    that is cheap, else one pass over the marks (u log u against num_features; either is exact).
    for (uint32_t id : batch.indices) {
        if (static_cast<int64_t>(id) >= num_features_) {  // leave the marks clean before throwing
            for (uint32_t t : grad.rows) slot_[t] = -1;
            grad.clear();
            check_index(id);
        }
        if (slot_[id] < 0) {
            slot_[id] = 0;
            grad.rows.push_back(id);
        }
    }
    const auto u = static_cast<int64_t>(grad.rows.size());
    if (u * static_cast<int64_t>(std::bit_width(static_cast<uint64_t>(u))) * 16 < num_features_) {
        std::sort(grad.rows.begin(), grad.rows.end());
    } else {
        grad.rows.clear();
        for (int64_t f = 0; f < num_features_; ++f)
            if (slot_[static_cast<size_t>(f)] >= 0) grad.rows.push_back(static_cast<uint32_t>(f));
    }
    for (int64_t i = 0; i < u; ++i) slot_[grad.rows[static_cast<size_t>(i)]] = static_cast<int32_t>(i);

    // 2. Sum value * dlogits[r] into each touched row, and dlogits into the bias.
    grad.values.assign(static_cast<size_t>(u * K), 0.0f);
    std::fill(bias_grad.begin(), bias_grad.end(), 0.0f);
    float* g = grad.values.data();
    for (int64_t r = 0; r < batch.rows(); ++r) {
        const auto idx = batch.row_indices(r);
        const auto val = batch.row_values(r);
        const float* d = dlogits + r * K;
        for (size_t j = 0; j < idx.size(); ++j) {
            float* row = g + static_cast<int64_t>(slot_[idx[j]]) * K;
            for (int64_t k = 0; k < K; ++k) row[k] += val[j] * d[k];
        }
        for (int64_t k = 0; k < K; ++k) bias_grad[static_cast<size_t>(k)] += d[k];
    }

    // 3. Leave the marks clean for the next step (touched entries only).
    for (uint32_t id : grad.rows) slot_[id] = -1;
}

std::vector<SparseLinear::NamedSpan> SparseLinear::named_spans() {
    return {{weight_.name, weight_.value.span()}, {bias_.name, bias_.value.span()}};
}

uint64_t SparseLinear::hash() const {
    const auto w = weight_.value.span();
    const auto b = bias_.value.span();
    return fnv1a(b.data(), b.size_bytes(), fnv1a(w.data(), w.size_bytes()));
}

}  // namespace ringtrain::nn

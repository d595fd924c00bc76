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

namespace {
// How many rows ahead forward and backward prefetch the table words a row reads.
constexpr int64_t kAheadRows = 2;
}  // namespace

void SparseLinear::check_index(uint32_t index) const {
    if (static_cast<int64_t>(index) >= num_features_)
        throw Error("sparse layer " + name_ + ": feature " + std::to_string(index) + " is past its " +
                    std::to_string(num_features_) + " features");
}

void SparseLinear::forward(const CsrBatch& batch, float* logits) const {
    const int64_t K = out_;
    const auto nf = static_cast<uint64_t>(num_features_);
    const float* W = weight_.value.data();
    const float* b = bias_.value.data();
    for (int64_t r = 0; r < batch.rows(); ++r) {
        const auto idx = batch.row_indices(r);
        const auto val = batch.row_values(r);
        float* out = logits + r * K;
        if (K == 1) {  // logistic regression: one dot product, kept in a register
            // The weights of a row kAheadRows on are fetched now: each row reads ~20-40 scattered words of a table
            // larger than L2, and without the hint the loads of one row overlap only with each other.
            if (r + kAheadRows < batch.rows())
                for (const uint32_t id : batch.row_indices(r + kAheadRows))
                    if (id < nf) __builtin_prefetch(W + id);
            float z = b[0];
            for (size_t j = 0; j < idx.size(); ++j) {
                if (idx[j] >= nf) [[unlikely]]
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

template <class F>
void SparseLinear::take_marked(F&& f) {
    for (size_t s = 0; s < touched_words_.size(); ++s) {
        for (uint64_t sw = touched_words_[s]; sw != 0; sw &= sw - 1) {
            const size_t w = s * 64 + static_cast<size_t>(std::countr_zero(sw));
            for (uint64_t bits = touched_[w]; bits != 0; bits &= bits - 1)
                f(static_cast<uint32_t>(w * 64 + static_cast<size_t>(std::countr_zero(bits))));
            touched_[w] = 0;
        }
        touched_words_[s] = 0;
    }
}

void SparseLinear::fail_index(uint32_t index) {
    take_marked([&](uint32_t id) {  // leave the scratch clean for the next call
        if (!acc_.empty()) acc_[id] = 0.0f;
    });
    check_index(index);
    throw Error("sparse layer " + name_ + ": feature " + std::to_string(index) + " rejected");  // not reached
}

void SparseLinear::backward(const CsrBatch& batch, const float* dlogits, SparseRows& grad, std::span<float> bias_grad) {
    const int64_t K = out_;
    if (static_cast<int64_t>(bias_grad.size()) != K)
        throw Error("sparse layer " + name_ + ": bias gradient has " + std::to_string(bias_grad.size()) +
                    " values, the layer " + std::to_string(K) + " outputs");
    if (touched_.empty()) {
        touched_.assign(static_cast<size_t>((num_features_ + 63) / 64), 0);
        touched_words_.assign((touched_.size() + 63) / 64, 0);
        if (K == 1) acc_.assign(static_cast<size_t>(num_features_), 0.0f);
        else slot_.assign(static_cast<size_t>(num_features_), 0);
    }
    grad.width = K;
    grad.clear();
    std::fill(bias_grad.begin(), bias_grad.end(), 0.0f);
    const auto nf = static_cast<uint64_t>(num_features_);

    if (K == 1) {
        // Logistic regression: each contribution summed straight into its feature's slot of acc_ (in batch-row
        // order, as a per-step row list would), then the touched features read out in ascending order.
        float* acc = acc_.data();
        for (int64_t r = 0; r < batch.rows(); ++r) {
            if (r + kAheadRows < batch.rows())  // as in forward: the accumulator slots of a later row
                for (const uint32_t id : batch.row_indices(r + kAheadRows))
                    if (id < nf) __builtin_prefetch(acc + id, 1);
            const auto idx = batch.row_indices(r);
            const auto val = batch.row_values(r);
            const float d = dlogits[r];
            for (size_t j = 0; j < idx.size(); ++j) {
                const uint32_t id = idx[j];
                if (id >= nf) [[unlikely]]
                    fail_index(id);
                acc[id] += val[j] * d;
                mark(id);
            }
            bias_grad[0] += d;
        }
        take_marked([&](uint32_t id) {
            grad.rows.push_back(id);
            grad.values.push_back(acc[id]);
            acc[id] = 0.0f;
        });
        return;
    }

    // K outputs: the touched features in order first (their positions in the gradient), then the sums.
    for (uint32_t id : batch.indices) {
        if (id >= nf) [[unlikely]]
            fail_index(id);
        mark(id);
    }
    take_marked([&](uint32_t id) {
        slot_[id] = static_cast<int32_t>(grad.rows.size());
        grad.rows.push_back(id);
    });
    grad.values.assign(grad.rows.size() * static_cast<size_t>(K), 0.0f);
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

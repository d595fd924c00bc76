// SparseLinear: the linear model of click-log training over a hashed feature space. A [num_features x K] weight
// table plus a bias[K]; a row's logits are an embedding-bag sum, logits[r] = bias + sum_j value_j * W[index_j].
// Backward gives a sparse gradient (SparseRows: the rows this batch touched, merged) instead of a dense one: a batch
// touches a few thousand of millions of rows.
//
// Zero-initialised, as logistic regression usually is: the loss is convex, so there is no symmetry to break and no
// reason for random starts; a weight never touched stays exactly 0 (sparse models, L1), and FTRL's weight is a
// function of its state that is 0 at the start, so the table and the optimizer agree from step 0.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ringtrain/core/csr_batch.hpp"
#include "ringtrain/core/host_memory.hpp"
#include "ringtrain/core/sparse_rows.hpp"
#include "ringtrain/core/tensor.hpp"
#include "ringtrain/nn/layer.hpp"

namespace ringtrain::nn {

class SparseLinear {
public:
    // Parameters are named "<name>.weight" [num_features, K] and "<name>.bias" [K]. Error when a size is not
    // positive or num_features does not fit 32-bit feature ids.
    SparseLinear(std::string name, int64_t num_features, int64_t out_features);

    const std::string& name() const { return name_; }
    int64_t num_features() const { return num_features_; }
    int64_t out_features() const { return out_; }

    // logits: batch.rows() x K, row-major. Error (naming it) for a feature index past num_features.
    void forward(const CsrBatch& batch, float* logits) const;
    // The same into a Tensor, resized to [rows, K] (what nn::Loss takes).
    void forward(const CsrBatch& batch, Tensor& logits) const;

    // dlogits: rows x K as the losses write them, d(scale * summed loss)/dlogits; the layer does not divide again,
    // so with the trainer's scale = 1/batch the gradient is the per-batch mean. Overwrites `grad` (width K, the
    // touched rows sorted and unique, a row's contributions from every batch row summed; a row touched with value 0
    // is still listed) and `bias_grad` (K values). O(nnz * K + u + num_features / 4096) for u touched rows (a
    // two-level bitmap gives them in order, no sort); no allocation once grad's buffers have grown.
    void backward(const CsrBatch& batch, const float* dlogits, SparseRows& grad, std::span<float> bias_grad);

    // For checkpoints, broadcast and local-SGD averaging: the values only (grad tensors stay empty — the gradient
    // is the SparseRows above).
    Parameter& weight() { return weight_; }
    Parameter& bias() { return bias_; }
    std::vector<Parameter*> parameters() { return {&weight_, &bias_}; }
    struct NamedSpan {
        std::string name;
        std::span<float> values;
    };
    std::vector<NamedSpan> named_spans();
    // FNV-1a over the weight then the bias values (what ranks compare to agree on the model).
    uint64_t hash() const;

private:
    void check_index(uint32_t index) const;
    [[noreturn]] void fail_index(uint32_t index);
    void mark(uint32_t id) {
        touched_[id >> 6] |= uint64_t{1} << (id & 63);
        touched_words_[id >> 12] |= uint64_t{1} << ((id >> 6) & 63);
    }
    // Calls f(id) for every marked id in ascending order and clears the marks.
    template <class F>
    void take_marked(F&& f);

    std::string name_;
    int64_t num_features_, out_;
    Parameter weight_, bias_;
    // backward's scratch, reused across steps and cleared only where touched, so a step costs O(nnz), not
    // O(num_features): the touched features as bits (touched_), the nonzero words of those bits (touched_words_),
    // and either (K = 1) the gradient accumulated in place per feature (acc_, zero between steps; the same
    // row-order sums as a per-row list) or (K > 1) each touched feature's position in the gradient (slot_, valid
    // for this step's touched features only).
    std::vector<uint64_t> touched_, touched_words_;
    std::vector<float, HugePageAllocator<float>> acc_;  // num_features_ floats, touched at random: huge pages
    std::vector<int32_t, HugePageAllocator<int32_t>> slot_;
};

}  // namespace ringtrain::nn

// Sparse optimizers: update only the rows of a sparse layer's table that a (merged, rank-averaged) gradient lists,
// plus its small dense bias. The rows a step does not list are left exactly as they are, which is what the dense
// update with zero gradient rows does for all three (SGD: w -= lr*0; AdaGrad: the sum grows by 0; FTRL: z and n
// unchanged, and w is already the function of them below), so touching only listed rows is exact, not an
// approximation (FTRL: at a constant alpha, its own assumption; under an lr schedule an untouched weight keeps the
// alpha of its last update, as in the paper's lazy per-coordinate form). Per coordinate, with g its gradient and lr
// this step's learning rate:
//   sgd:     w -= lr * g
//   adagrad: s += g^2;  w -= lr * g / (sqrt(s) + eps)               (s starts at initial_accumulator; PyTorch's form)
//   ftrl:    FTRL-Proximal (McMahan et al. 2013, "Ad Click Prediction: a View from the Trenches", Algorithm 1),
//            alpha = lr:   sigma = (sqrt(n + g^2) - sqrt(n)) / alpha;  z += g - sigma * w;  n += g^2;
//            w = 0 if |z| <= l1, else -(z - sign(z) * l1) / ((beta + sqrt(n)) / alpha + l2)
//            (z, n start at 0, so w = 0 matches the zero-initialised table). The bias follows the same rule with
//            l1 = l2 = 0: it is one always-present feature, and shrinking it towards 0 would pull every prediction
//            towards a 50% click rate, far from click logs' few percent. FTRL assumes a constant alpha; a schedule
//            changes it between steps, and lr must stay positive.
// Arithmetic per coordinate is in double, the state is stored in float32.
// A SparseOptimizer is an optim::Optimizer, so checkpoints save and restore its state tensors ("<param>.<suffix>")
// and step count with the dense code's functions.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ringtrain/core/sparse_rows.hpp"
#include "ringtrain/nn/layer.hpp"
#include "ringtrain/optim/optimizer.hpp"

namespace ringtrain::optim {

struct SparseOptimizerOptions {
    std::string name = "adagrad";      // sgd | adagrad | ftrl
    float initial_accumulator = 0.0f;  // adagrad: s's start (PyTorch's default 0; TensorFlow's is 0.1)
    float eps = 1e-10f;                // adagrad (PyTorch's default)
    float beta = 1.0f;                 // ftrl (the paper finds beta = 1 usually good enough)
    float l1 = 0.0f, l2 = 0.0f;        // ftrl
};

class SparseOptimizer : public Optimizer {
public:
    // One update: grad (width K = the bias size, rows sorted, unique and below the table's row count) to those rows
    // of the table, bias_grad (K values) to the bias. Counts a step. Error for a gradient that does not fit.
    void apply(const SparseRows& grad, std::span<const float> bias_grad, float lr);
    // Optimizer::step: apply() of the gradient named by bind_gradient (the trainer's buffers, which backward fills
    // and the sparse sync averages before the step). Error when none is bound.
    void step(float lr) override;
    void bind_gradient(const SparseRows* grad, std::span<const float> bias_grad) {
        bound_grad_ = grad;
        bound_bias_grad_ = bias_grad;
    }
    // Local SGD with FTRL: FTRL's weights are a function of its z and n, and the next update of a coordinate
    // recomputes its weight from them, so averaging the weights alone across ranks would be silently undone. Average
    // the state tensors (state()) instead and then call this: every weight and the bias recomputed from the state at
    // alpha = lr (O(rows * K)). SGD and AdaGrad keep their weights outside the state: nothing to do.
    virtual void recompute_weights(float lr) {}
    // recompute_weights for another state, computed aside: the weight and bias FTRL holds with `state` (tensors of
    // state()'s shapes, in its order) at alpha = lr, written into `weight` and `bias` (the table's and the bias's
    // shapes). For a local SGD checkpoint's model, the ranks' average made without changing what they train on.
    // SGD and AdaGrad keep their weights outside the state: nothing to do.
    virtual void weights_for_state(const std::vector<Tensor>& state, float lr, Tensor& weight, Tensor& bias) const {}

    // Owner-computes updates (sync.sparse_update owner): each rank updates only the rows it owns, then ships them
    // with their per-row state to the other ranks, which write them into their own table and state. A row travels
    // as row_floats() floats: its weight row (K), then each per-row state tensor's row (K each) in state() order
    // (SGD: the weight only; AdaGrad: + the squared-gradient sum; FTRL: + z, n — its weight is shipped, not
    // recomputed, so the copy is bit-exact whatever alpha was). Copies, not arithmetic: after import the rows hold
    // exactly the exporter's bits. The bias is not included (every rank updates it itself).
    int64_t row_floats();
    // out.rows = rows (sorted, unique, below the table's row count), out.width = row_floats(), out.values theirs.
    void export_rows(std::span<const uint32_t> rows, SparseRows& out);
    // Writes in's rows (width row_floats(), rows below the table's row count) into the table and the state.
    void import_rows(const SparseRows& in);

protected:
    // weight [rows, K] and bias [K]: a SparseLinear's parameters (borrowed; they must outlive the optimizer).
    SparseOptimizer(nn::Parameter& weight, nn::Parameter& bias);
    virtual void update(const SparseRows& grad, std::span<const float> bias_grad, float lr) = 0;

    nn::Parameter& weight_;
    nn::Parameter& bias_;
    int64_t rows_, width_;

private:
    // The [rows, K] tensors a row is made of: the weight, then the state tensors of the weight's shape (found once,
    // on first use: state() is virtual, so the constructor cannot ask).
    const std::vector<Tensor*>& row_tensors();

    std::vector<Tensor*> row_tensors_;
    const SparseRows* bound_grad_ = nullptr;
    std::span<const float> bound_bias_grad_;
};

// InputError for an unknown name ("sgd", "adagrad" or "ftrl") or an option out of range (naming the key
// optimizer.<option>); Error when weight and bias do not have the shapes above.
std::unique_ptr<SparseOptimizer> make_sparse_optimizer(const SparseOptimizerOptions& options, nn::Parameter& weight,
                                                       nn::Parameter& bias);

}  // namespace ringtrain::optim

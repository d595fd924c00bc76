// SGD, AdaGrad and FTRL-Proximal over a sparse layer's touched rows (formulas in the header).
#include <algorithm>
#include <cmath>
#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/optim/sparse_optimizer.hpp"

namespace ringtrain::optim {

SparseOptimizer::SparseOptimizer(nn::Parameter& weight, nn::Parameter& bias) : weight_(weight), bias_(bias) {
    if (weight.value.ndim() != 2 || bias.value.ndim() != 1 || weight.value.dim(1) != bias.value.dim(0))
        throw Error("sparse optimizer: " + weight.name + " " + shape_string(weight.value.shape()) + " and " + bias.name +
                    " " + shape_string(bias.value.shape()) + " are not a [rows, K] table and a [K] bias");
    if (weight.value.device() != Device::CPU || bias.value.device() != Device::CPU)
        throw Error("sparse optimizer: the sparse model lives in host memory");
    rows_ = weight.value.dim(0);
    width_ = weight.value.dim(1);
}

void SparseOptimizer::apply(const SparseRows& grad, std::span<const float> bias_grad, float lr) {
    // A gradient that does not fit would write outside the table, so it is checked (O(rows), next to the update).
    if (static_cast<int64_t>(bias_grad.size()) != width_ || (grad.width != width_ && !grad.rows.empty()) ||
        grad.values.size() != grad.rows.size() * static_cast<size_t>(width_))
        throw Error("sparse optimizer: gradient of width " + std::to_string(grad.width) + " with " +
                    std::to_string(grad.rows.size()) + " rows, " + std::to_string(grad.values.size()) + " values and " +
                    std::to_string(bias_grad.size()) + " bias values does not fit " + weight_.name + " " +
                    shape_string(weight_.value.shape()));
    for (size_t i = 0; i < grad.rows.size(); ++i)
        if (grad.rows[i] >= static_cast<uint64_t>(rows_) || (i > 0 && grad.rows[i] <= grad.rows[i - 1]))
            throw Error("sparse optimizer: gradient row " + std::to_string(grad.rows[i]) + " is past " +
                        std::to_string(rows_) + " rows or out of order");
    update(grad, bias_grad, lr);
    ++steps_;
}

void SparseOptimizer::step(float lr) {
    if (!bound_grad_) throw Error("sparse optimizer: step() before bind_gradient()");
    apply(*bound_grad_, bound_bias_grad_, lr);
}

const std::vector<Tensor*>& SparseOptimizer::row_tensors() {
    if (row_tensors_.empty()) {
        row_tensors_.push_back(&weight_.value);
        for (auto& [name, t] : state())
            if (t->shape() == weight_.value.shape()) row_tensors_.push_back(t);
    }
    return row_tensors_;
}

int64_t SparseOptimizer::row_floats() { return static_cast<int64_t>(row_tensors().size()) * width_; }

namespace {

// The copies of export_rows / import_rows, with the per-row tensors' data pointers looked up once per call. P (the
// number of [rows, K] tensors: 1 to 3) and K = 1 (logistic regression) known at compile time make a row a few
// moves; through Tensor* and a copy per part a row cost ~44 instructions (callgrind), more than AdaGrad's update.
template <size_t P, bool Export>
void copy_rows_k1(const float* const* base_in, float* const* base_out, std::span<const uint32_t> rows, float* flat,
                  const float* flat_in) {
    for (size_t i = 0; i < rows.size(); ++i)
        for (size_t p = 0; p < P; ++p) {
            if constexpr (Export)
                flat[i * P + p] = base_in[p][rows[i]];
            else
                base_out[p][rows[i]] = flat_in[i * P + p];
        }
}

template <bool Export>
void copy_rows(const std::vector<Tensor*>& parts, std::span<const uint32_t> rows, size_t k, float* flat,
               const float* flat_in) {
    float* base[3] = {};
    const size_t np = parts.size();
    for (size_t p = 0; p < np && p < 3; ++p) base[p] = parts[p]->data();
    if (k == 1 && np >= 1 && np <= 3) {
        if (np == 1) copy_rows_k1<1, Export>(base, base, rows, flat, flat_in);
        if (np == 2) copy_rows_k1<2, Export>(base, base, rows, flat, flat_in);
        if (np == 3) copy_rows_k1<3, Export>(base, base, rows, flat, flat_in);
        return;
    }
    for (size_t i = 0; i < rows.size(); ++i)
        for (size_t p = 0; p < np; ++p) {
            float* row = parts[p]->data() + static_cast<size_t>(rows[i]) * k;
            if constexpr (Export)
                std::copy_n(row, k, flat + (i * np + p) * k);
            else
                std::copy_n(flat_in + (i * np + p) * k, k, row);
        }
}

// The largest id first (a reduction without an early exit vectorises: ~1 instruction a row, not ~6).
void check_rows(std::span<const uint32_t> rows, int64_t table_rows, const char* what) {
    uint32_t largest = 0;
    for (const uint32_t row : rows) largest = std::max(largest, row);
    if (!rows.empty() && largest >= static_cast<uint64_t>(table_rows))
        throw Error(std::string("sparse optimizer: ") + what + " of row " + std::to_string(largest) + ", past " +
                    std::to_string(table_rows) + " rows");
}

}  // namespace

void SparseOptimizer::export_rows(std::span<const uint32_t> rows, SparseRows& out) {
    check_rows(rows, rows_, "export");
    out.width = row_floats();
    out.rows.assign(rows.begin(), rows.end());
    out.values.resize(rows.size() * static_cast<size_t>(out.width));
    copy_rows<true>(row_tensors(), rows, static_cast<size_t>(width_), out.values.data(), nullptr);
}

void SparseOptimizer::import_rows(const SparseRows& in) {
    if ((in.width != row_floats() && !in.rows.empty()) || in.values.size() != in.rows.size() * static_cast<size_t>(in.width))
        throw Error("sparse optimizer: import of " + std::to_string(in.rows.size()) + " rows of width " +
                    std::to_string(in.width) + " (" + std::to_string(in.values.size()) + " values) into rows of " +
                    std::to_string(row_floats()) + " floats (" + name() + ")");
    check_rows(in.rows, rows_, "import");
    copy_rows<false>(row_tensors(), in.rows, static_cast<size_t>(width_), nullptr, in.values.data());
}

namespace {

class SparseSgd final : public SparseOptimizer {
public:
    SparseSgd(nn::Parameter& w, nn::Parameter& b) : SparseOptimizer(w, b) {}
    std::string name() const override { return "sgd"; }
    std::vector<std::pair<std::string, Tensor*>> state() override { return {}; }

private:
    void update(const SparseRows& grad, std::span<const float> bias_grad, float lr) override {
        float* W = weight_.value.data();
        for (int64_t i = 0; i < grad.count(); ++i) {
            float* w = W + static_cast<int64_t>(grad.rows[static_cast<size_t>(i)]) * width_;
            const auto g = grad.row(i);
            for (int64_t k = 0; k < width_; ++k) w[k] -= lr * g[static_cast<size_t>(k)];
        }
        float* b = bias_.value.data();
        for (int64_t k = 0; k < width_; ++k) b[k] -= lr * bias_grad[static_cast<size_t>(k)];
    }
};

class SparseAdagrad final : public SparseOptimizer {
public:
    SparseAdagrad(nn::Parameter& w, nn::Parameter& b, const SparseOptimizerOptions& o)
        : SparseOptimizer(w, b),
          eps_(o.eps),
          sum_w_(Tensor::filled(w.value.shape(), o.initial_accumulator)),
          sum_b_(Tensor::filled(b.value.shape(), o.initial_accumulator)) {}
    std::string name() const override { return "adagrad"; }
    std::vector<std::pair<std::string, Tensor*>> state() override {
        return {{weight_.name + ".adagrad_sum", &sum_w_}, {bias_.name + ".adagrad_sum", &sum_b_}};
    }

private:
    void coordinate(float& w, float& s, float g, float lr) const {
        const double s_new = static_cast<double>(s) + static_cast<double>(g) * g;
        s = static_cast<float>(s_new);
        w = static_cast<float>(w - static_cast<double>(lr) * g / (std::sqrt(static_cast<double>(s)) + eps_));
    }
    void update(const SparseRows& grad, std::span<const float> bias_grad, float lr) override {
        float* W = weight_.value.data();
        float* S = sum_w_.data();
        for (int64_t i = 0; i < grad.count(); ++i) {
            const int64_t off = static_cast<int64_t>(grad.rows[static_cast<size_t>(i)]) * width_;
            const auto g = grad.row(i);
            for (int64_t k = 0; k < width_; ++k) coordinate(W[off + k], S[off + k], g[static_cast<size_t>(k)], lr);
        }
        for (int64_t k = 0; k < width_; ++k)
            coordinate(bias_.value.data()[k], sum_b_.data()[k], bias_grad[static_cast<size_t>(k)], lr);
    }

    double eps_;
    Tensor sum_w_, sum_b_;
};

class SparseFtrl final : public SparseOptimizer {
public:
    SparseFtrl(nn::Parameter& w, nn::Parameter& b, const SparseOptimizerOptions& o)
        : SparseOptimizer(w, b),
          beta_(o.beta),
          l1_(o.l1),
          l2_(o.l2),
          z_w_(Tensor::zeros(w.value.shape())),
          n_w_(Tensor::zeros(w.value.shape())),
          z_b_(Tensor::zeros(b.value.shape())),
          n_b_(Tensor::zeros(b.value.shape())) {}
    std::string name() const override { return "ftrl"; }
    std::vector<std::pair<std::string, Tensor*>> state() override {
        return {{weight_.name + ".ftrl_z", &z_w_}, {weight_.name + ".ftrl_n", &n_w_},
                {bias_.name + ".ftrl_z", &z_b_}, {bias_.name + ".ftrl_n", &n_b_}};
    }

private:
    // The weight as a function of the state (the closed form of the per-coordinate proximal step).
    float weight_of(float z, float n, double alpha, double l1, double l2) const {
        const double zs = z, ns = n;
        if (std::fabs(zs) <= l1) return 0.0f;
        const double sign = zs < 0.0 ? -1.0 : 1.0;
        return static_cast<float>(-(zs - sign * l1) / ((beta_ + std::sqrt(ns)) / alpha + l2));
    }
    // One coordinate of Algorithm 1: the z, n update with this step's gradient, then w recomputed from the stored
    // (float) z and n, so that w stays exactly the function of the state: a zero gradient then changes nothing.
    void coordinate(float& w, float& z, float& n, float g, double alpha, double l1, double l2) const {
        const double gd = g, n_old = n;
        const double n_new = n_old + gd * gd;
        const double sigma = (std::sqrt(n_new) - std::sqrt(n_old)) / alpha;
        z = static_cast<float>(z + gd - sigma * w);
        n = static_cast<float>(n_new);
        w = weight_of(z, n, alpha, l1, l2);
    }
    void recompute_weights(float lr) override {
        weights_of_state(z_w_, n_w_, z_b_, n_b_, lr, weight_.value, bias_.value);
    }
    void weights_for_state(const std::vector<Tensor>& state, float lr, Tensor& weight, Tensor& bias) const override {
        const bool fits = state.size() == 4 && state[0].shape() == z_w_.shape() && state[1].shape() == n_w_.shape() &&
                          state[2].shape() == z_b_.shape() && state[3].shape() == n_b_.shape() &&
                          weight.shape() == weight_.value.shape() && bias.shape() == bias_.value.shape();
        if (!fits)
            throw Error("ftrl: weights_for_state needs z and n of the table and the bias, and tensors of their shapes");
        weights_of_state(state[0], state[1], state[2], state[3], lr, weight, bias);
    }
    void weights_of_state(const Tensor& z_w, const Tensor& n_w, const Tensor& z_b, const Tensor& n_b, float lr,
                          Tensor& weight, Tensor& bias) const {
        if (!(lr > 0.0f)) throw Error("ftrl: the learning rate (alpha) must be positive, got " + std::to_string(lr));
        float* W = weight.data();
        for (int64_t i = 0; i < weight.numel(); ++i) W[i] = weight_of(z_w.data()[i], n_w.data()[i], lr, l1_, l2_);
        for (int64_t k = 0; k < width_; ++k) bias.data()[k] = weight_of(z_b.data()[k], n_b.data()[k], lr, 0.0, 0.0);
    }
    void update(const SparseRows& grad, std::span<const float> bias_grad, float lr) override {
        if (!(lr > 0.0f))
            throw Error("ftrl: the learning rate (alpha) must be positive, got " + std::to_string(lr));
        float* W = weight_.value.data();
        float* Z = z_w_.data();
        float* N = n_w_.data();
        for (int64_t i = 0; i < grad.count(); ++i) {
            const int64_t off = static_cast<int64_t>(grad.rows[static_cast<size_t>(i)]) * width_;
            const auto g = grad.row(i);
            for (int64_t k = 0; k < width_; ++k)
                coordinate(W[off + k], Z[off + k], N[off + k], g[static_cast<size_t>(k)], lr, l1_, l2_);
        }
        for (int64_t k = 0; k < width_; ++k)
            coordinate(bias_.value.data()[k], z_b_.data()[k], n_b_.data()[k], bias_grad[static_cast<size_t>(k)], lr, 0.0, 0.0);
    }

    double beta_, l1_, l2_;
    Tensor z_w_, n_w_, z_b_, n_b_;
};

void require_non_negative(float v, const char* key) {
    if (!(v >= 0.0f) || !std::isfinite(v))
        throw InputError(std::string("optimizer.") + key + " must be a finite number >= 0, got " + std::to_string(v));
}

}  // namespace

std::unique_ptr<SparseOptimizer> make_sparse_optimizer(const SparseOptimizerOptions& o, nn::Parameter& weight,
                                                       nn::Parameter& bias) {
    if (o.name == "sgd") return std::make_unique<SparseSgd>(weight, bias);
    if (o.name == "adagrad") {
        require_non_negative(o.initial_accumulator, "initial_accumulator");
        require_non_negative(o.eps, "eps");
        if (o.initial_accumulator == 0.0f && o.eps == 0.0f)
            throw InputError("optimizer.eps must be > 0 when optimizer.initial_accumulator is 0 (the first step would divide by 0)");
        return std::make_unique<SparseAdagrad>(weight, bias, o);
    }
    if (o.name == "ftrl") {
        require_non_negative(o.beta, "beta");
        require_non_negative(o.l1, "l1");
        require_non_negative(o.l2, "l2");
        return std::make_unique<SparseFtrl>(weight, bias, o);
    }
    throw InputError("optimizer.name '" + o.name + "' is not a sparse optimizer; use sgd, adagrad or ftrl");
}

}  // namespace ringtrain::optim

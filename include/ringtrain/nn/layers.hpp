// The concrete layers: Linear, Conv2d, MaxPool2d, AvgPool2d, GlobalAvgPool, BatchNorm, ReLU, Sigmoid, Tanh,
// Dropout, Flatten.
// Weights use PyTorch's default initialisation (uniform in +-1/sqrt(fan_in)), so accuracies compare with it.
#pragma once

#include "ringtrain/nn/batch_stats_reducer.hpp"
#include "ringtrain/nn/layer.hpp"
#include "ringtrain/ops/ops.hpp"

namespace ringtrain::nn {

class Linear : public Layer {
public:
    Linear(int64_t out_features, bool bias = true) : out_(out_features), has_bias_(bias) {}
    std::string type() const override { return "linear"; }
    Shape output_shape(const Shape& input) const override;
    double forward_flops(const Shape& input) const override { return 2.0 * double(shape_numel(input)) * out_; }
    double parameter_values(const Shape& input) const override {
        return double(shape_numel(input)) * double(out_) + (has_bias_ ? double(out_) : 0.0);
    }
    void build(const Shape& input, Rng& rng) override;
    void forward(const Tensor& x, Tensor& y, const ForwardContext& ctx) override;
    void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, bool accumulate) override;
    std::vector<Parameter*> parameters() override;

private:
    int64_t in_ = 0, out_;
    bool has_bias_;
    Parameter weight_, bias_;  // weight [out, in] as in PyTorch
    ops::Workspace ws_;        // the oneDNN matmul primitives of ops::layer_gemm
};

class Conv2d : public Layer {
public:
    Conv2d(int64_t out_channels, int64_t kernel_h, int64_t kernel_w, ops::Conv2dParams p, bool bias = true)
        : out_(out_channels), kh_(kernel_h), kw_(kernel_w), p_(p), has_bias_(bias) {}
    std::string type() const override { return "conv2d"; }
    Shape output_shape(const Shape& input) const override;
    double forward_flops(const Shape& input) const override {
        return 2.0 * double(shape_numel(output_shape(input))) * double(input.at(0)) * double(kh_ * kw_);
    }
    double parameter_values(const Shape& input) const override {
        return double(out_) * double(input.at(0)) * double(kh_) * double(kw_) + (has_bias_ ? double(out_) : 0.0);
    }
    void build(const Shape& input, Rng& rng) override;
    void forward(const Tensor& x, Tensor& y, const ForwardContext& ctx) override;
    void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, bool accumulate) override;
    std::vector<Parameter*> parameters() override;
    // ReLU fusion (Model, on the CPU): `output`: forward applies the ReLU that follows (y = max(conv, 0));
    // `input`: x is a ReLU's output and backward applies that ReLU's backward to dx.
    void fuse_relu(bool output, bool input) {
        relu_out_ = output;
        relu_in_ = input;
    }

private:
    bool relu_out_ = false, relu_in_ = false;
    int64_t in_ = 0, out_, kh_, kw_;
    ops::Conv2dParams p_;
    bool has_bias_;
    Parameter weight_, bias_;  // weight [out, in, kh, kw]
    ops::Workspace ws_;
};

class MaxPool2d : public Layer {
public:
    explicit MaxPool2d(ops::Pool2dParams p) : p_(p) {}
    std::string type() const override { return "maxpool2d"; }
    Shape output_shape(const Shape& input) const override;
    void forward(const Tensor& x, Tensor& y, const ForwardContext& ctx) override;
    void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, bool accumulate) override;
    // ReLU fusion (Model, on the CPU): x is a ReLU's output and backward applies that ReLU's backward to dx.
    void fuse_relu_input(bool on) { relu_in_ = on; }

private:
    ops::Pool2dParams p_;
    bool relu_in_ = false;
};

// Average pooling. Padded positions count in the divisor, as PyTorch's default.
class AvgPool2d : public Layer {
public:
    explicit AvgPool2d(ops::Pool2dParams p) : p_(p) {}
    std::string type() const override { return "avgpool2d"; }
    Shape output_shape(const Shape& input) const override;
    void forward(const Tensor& x, Tensor& y, const ForwardContext& ctx) override;
    void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, bool accumulate) override;

private:
    ops::Pool2dParams p_;
};

// The mean of each channel plane: [C, H, W] -> [C] (as Keras' GlobalAveragePooling2D; no flatten needed after it).
class GlobalAvgPool : public Layer {
public:
    std::string type() const override { return "global_avgpool"; }
    Shape output_shape(const Shape& input) const override;
    void forward(const Tensor& x, Tensor& y, const ForwardContext& ctx) override;
    void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, bool accumulate) override;
};

// Batch normalisation as torch.nn.BatchNorm1d/2d: training normalises with this rank's batch statistics (as DDP
// without SyncBatchNorm) and updates the running mean/var; evaluation uses the running stats. With a
// BatchStatsReducer set (sync.batchnorm), training uses the statistics of every rank's batch together, as
// torch.nn.SyncBatchNorm (CPU and CUDA). batchnorm1d takes [C] or [C, L] samples, batchnorm2d [C, H, W].
// gamma/beta are parameters ("<name>.weight", "<name>.bias"); running_mean/running_var are buffers().
class BatchNorm : public Layer {
public:
    // spatial_dims: 1 for batchnorm1d, 2 for batchnorm2d.
    BatchNorm(int spatial_dims, float momentum, float eps);
    std::string type() const override { return spatial_dims_ == 2 ? "batchnorm2d" : "batchnorm1d"; }
    Shape output_shape(const Shape& input) const override;
    double parameter_values(const Shape& input) const override { return 2.0 * double(input.at(0)); }
    void build(const Shape& input, Rng& rng) override;
    void forward(const Tensor& x, Tensor& y, const ForwardContext& ctx) override;
    void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, bool accumulate) override;
    std::vector<Parameter*> parameters() override { return {&gamma_, &beta_}; }
    std::vector<Parameter*> buffers() override { return {&running_mean_, &running_var_}; }
    float momentum() const { return p_.momentum; }
    float eps() const { return p_.eps; }
    // Borrowed; null = this rank's batch alone. Every rank must set the same (all or none), at the same step.
    void set_stats_reducer(BatchStatsReducer* reducer) { reducer_ = reducer; }
    bool synchronised() const { return reducer_ != nullptr; }
    // ReLU fusion (Model, on the CPU): forward applies the ReLU that follows (y = max(BatchNorm(x), 0)). Backward
    // is unchanged: it reads x, not y, and the ReLU's backward stays with that ReLU or the layer after it.
    void fuse_relu_output(bool on) { p_.relu = on; }

private:
    // x as [N, C, S]: 4-D for the ops whatever the sample rank.
    Tensor as_channels(const Tensor& t) const;
    // The ops' cross-rank sum over reducer_ (empty without one).
    ops::CrossRankSum across() const;

    int spatial_dims_;
    ops::BatchNormParams p_;
    Parameter gamma_, beta_, running_mean_, running_var_;
    Tensor mean_, inv_std_;    // of the last forward, for backward
    bool last_training_ = true;
    BatchStatsReducer* reducer_ = nullptr;
};

class ActivationLayer : public Layer {
public:
    explicit ActivationLayer(ops::Activation a) : a_(a) {}
    std::string type() const override;
    Shape output_shape(const Shape& input) const override { return input; }
    void forward(const Tensor& x, Tensor& y, const ForwardContext& ctx) override;
    void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, bool accumulate) override;

private:
    ops::Activation a_;
};

class Dropout : public Layer {
public:
    explicit Dropout(float p);
    std::string type() const override { return "dropout"; }
    Shape output_shape(const Shape& input) const override { return input; }
    void forward(const Tensor& x, Tensor& y, const ForwardContext& ctx) override;
    void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, bool accumulate) override;
    float p() const { return p_; }

private:
    float p_;
    Tensor mask_;
    bool last_training_ = false;
};

class Flatten : public Layer {
public:
    std::string type() const override { return "flatten"; }
    Shape output_shape(const Shape& input) const override { return {shape_numel(input)}; }
    void forward(const Tensor& x, Tensor& y, const ForwardContext& ctx) override;
    void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, bool accumulate) override;
};

}  // namespace ringtrain::nn

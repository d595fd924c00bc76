// Layer: the small forward/backward interface every building block of a model implements (as in Caffe).
// Layers own their parameters (value + gradient) and scratch; they call ops and never branch on the device.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ringtrain/core/rng.hpp"
#include "ringtrain/core/tensor.hpp"

namespace ringtrain::nn {

struct Parameter {
    std::string name;  // unique within a model, e.g. "conv1.weight"
    Tensor value;
    Tensor grad;  // same shape as value
};

struct ForwardContext {
    bool training = true;
    Rng* rng = nullptr;  // for stochastic layers (dropout); required when training
};

class Layer {
public:
    virtual ~Layer() = default;

    virtual std::string type() const = 0;
    const std::string& name() const { return name_; }
    void set_name(std::string n) { name_ = std::move(n); }

    // Shape of one output sample for one input sample (batch dimension excluded). Throws InputError when the
    // input does not fit (e.g. a kernel larger than the image), naming the layer.
    virtual Shape output_shape(const Shape& input) const = 0;
    // Allocates and initialises parameters for the given input sample shape (called once, before forward).
    virtual void build(const Shape& input, Rng& rng) {}

    // y must be resized by the layer to [N, output_shape...]; buffers keep their capacity across steps.
    virtual void forward(const Tensor& x, Tensor& y, const ForwardContext& ctx) = 0;
    // Given x, y (from forward) and dy, writes dx (when dx != nullptr) and parameter gradients
    // (overwritten, or added to when accumulate is true).
    virtual void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, bool accumulate) = 0;

    virtual std::vector<Parameter*> parameters() { return {}; }
    // Non-trainable state that evaluation depends on (BatchNorm's running mean/var): never given to an optimizer
    // or gradient sync; a checkpoint must carry it. Its `grad` is empty.
    virtual std::vector<Parameter*> buffers() { return {}; }
    // How many parameter values build() allocates for this input sample shape, before it runs (for memory
    // estimates; a double so that absurd sizes cannot overflow).
    virtual double parameter_values(const Shape& input) const { return 0.0; }
    // Floating-point operations of one sample's forward pass (multiply-adds x 2; 0 for cheap layers).
    virtual double forward_flops(const Shape& input) const { return 0.0; }

private:
    std::string name_;
};

}  // namespace ringtrain::nn

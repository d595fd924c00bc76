// Model: a sequence of layers built from a JSON architecture (models/*.json), with reused activation buffers.
// Backward walks the layers in reverse and reports each parameter's gradient as ready (the hook for overlap).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ringtrain/nn/batch_stats_reducer.hpp"
#include "ringtrain/nn/layer.hpp"
#include "ringtrain/nn/loss.hpp"

namespace ringtrain::nn {

// What a model file asks for, known before any parameter is allocated: for memory estimates and for checking the
// model against the data set before anything is built.
struct ModelFootprint {
    struct LayerCost {
        std::string where;        // "models/x.json: .layers[2] (linear)"
        double parameters = 0;    // parameter values the layer allocates
        double outputs = 0;       // values of its output, per sample
    };
    Shape input, output;  // per sample
    std::string loss;     // the loss type, e.g. "sigmoid_bce"
    std::vector<LayerCost> layers;
};

class Model {
public:
    // Builds the layers described by `arch` for samples of shape `input` and initialises them from `rng`.
    // `source` names the file in error messages. Throws InputError for unknown layers, bad keys, misfit shapes.
    Model(const nlohmann::json& arch, const Shape& input, Rng& rng, const std::string& source = "model");
    static Model from_file(const std::string& path, const Shape& input, Rng& rng);
    // Reads the model file and shapes its layers for `input` without building them (the same checks as from_file).
    static ModelFootprint footprint(const std::string& path, const Shape& input);

    const std::string& name() const { return name_; }
    const Shape& input_shape() const { return input_; }
    const Shape& output_shape() const { return output_; }
    Loss& loss() { return *loss_; }

    // Moves every parameter (value and gradient) to `device`; activations follow their input from then on.
    // Call before building an optimizer (its state is allocated where the parameters are).
    void to(Device device);
    Device device() const { return device_; }

    // All parameters in a fixed order: layer order, weight before bias.
    const std::vector<Parameter*>& parameters() const { return params_; }
    // Synchronised BatchNorm: every batchnorm layer sums its statistics through `reducer` (borrowed; null = per-rank
    // statistics again). Returns how many layers that concerns (0: the model has no batchnorm).
    int set_batch_stats_reducer(BatchStatsReducer* reducer);
    // Non-trainable layer state (BatchNorm running stats) in layer order; see Layer::buffers().
    const std::vector<Parameter*>& buffers() const { return buffers_; }
    // What a checkpoint holds and a resumed run broadcasts: the parameters, then the buffers (a model without
    // buffers gives exactly parameters(), so its checkpoints are unchanged).
    std::vector<Parameter*> checkpoint_tensors() const;
    int64_t parameter_count() const;
    // Forward FLOPs per sample (backward costs about twice that).
    double forward_flops_per_sample() const;
    // A summary of layers and shapes for `ringtrain info` and logs.
    std::string describe() const;

    // Runs every layer; returns the logits (a buffer owned by the model, valid until the next forward).
    const Tensor& forward(const Tensor& x, const ForwardContext& ctx);
    // Back-propagates dlogits. `on_ready(p)` is called once per parameter as soon as its gradient is final,
    // last layer first. With accumulate, gradients are added to the existing ones.
    void backward(const Tensor& dlogits, const std::function<void(Parameter&)>& on_ready = {},
                  bool accumulate = false);
    void zero_grad();

    // Per-layer time of the last forward and backward (seconds), for the per-layer profile.
    struct LayerTiming {
        std::string name;
        double forward_s = 0, backward_s = 0;
    };
    const std::vector<LayerTiming>& layer_timings() const { return timings_; }
    // ReLU layers whose forward / backward a neighbouring conv2d or maxpool2d does (the CPU's ReLU fusion).
    std::pair<int, int> fused_relus() const;
    void set_profile(bool on) { profile_ = on; }
    // Called after each layer's forward or backward with its start and end (steady-clock seconds), e.g. to
    // draw a timeline. Setting one turns on per-layer timing.
    using LayerObserver = std::function<void(const std::string& layer, bool backward, double start_s, double end_s)>;
    void set_layer_observer(LayerObserver observer) { observer_ = std::move(observer); }

private:
    struct Blueprint;
    // ReLU fusion (CPU only; results equal the unfused layers'): a relu after a conv2d is applied by that conv's
    // forward, its backward by the conv2d or maxpool2d after it; the relu layer then only passes its tensor on.
    void plan_relu_fusion(bool on);

    std::string name_;
    Shape input_, output_;
    std::vector<std::unique_ptr<Layer>> layers_;
    std::vector<std::vector<Parameter*>> layer_params_;
    std::vector<Parameter*> params_;
    std::vector<Parameter*> buffers_;
    std::unique_ptr<Loss> loss_;
    // acts_[0] aliases the input; acts_[i+1] is layer i's output. grads_ likewise for gradients.
    std::vector<Tensor> acts_;
    std::vector<Tensor> grads_;
    std::vector<char> relu_done_forward_, relu_done_backward_;  // per layer: a neighbour does this relu's work
    std::vector<LayerTiming> timings_;
    bool profile_ = false;
    LayerObserver observer_;
    Device device_ = Device::CPU;
};

}  // namespace ringtrain::nn

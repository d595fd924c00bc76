#include "ringtrain/nn/model.hpp"

#include <chrono>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/json_file.hpp"
#include "ringtrain/nn/layer_registry.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain::nn {

using nlohmann::json;

namespace {

double seconds_of(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// The most values one sample may hold at any layer: ops hand per-sample sizes to BLAS and cuDNN as int, and
// shapes past it would overflow int64 arithmetic once multiplied by a batch.
constexpr double kMaxSampleValues = double((int64_t{1} << 31) - 1);

// Every dimension positive and the product within kMaxSampleValues, computed without overflow.
bool sane_sample_shape(const Shape& s) {
    double n = 1;
    for (int64_t d : s) {
        if (d < 1) return false;
        n *= double(d);
    }
    return !s.empty() && n <= kMaxSampleValues;
}

}  // namespace

// A model file's layers, made and shaped but not built: no parameter is allocated yet, so a memory estimate can
// run first (Model::footprint) and the constructor builds from the same reading.
struct Model::Blueprint {
    std::string name;
    Shape input, output;
    std::unique_ptr<Loss> loss;
    std::vector<std::unique_ptr<Layer>> layers;
    std::vector<Shape> inputs;       // each layer's input sample shape
    std::vector<std::string> where;  // "models/x.json: .layers[2]"

    Blueprint(const json& arch, const Shape& data_input, const std::string& source);
};

Model::Blueprint::Blueprint(const json& arch, const Shape& data_input, const std::string& source) : input(data_input) {
    if (!arch.is_object()) throw InputError(source + ": a model file must hold a JSON object");
    static const std::set<std::string> known{"name", "input", "layers", "loss", "description"};
    for (auto it = arch.begin(); it != arch.end(); ++it)
        if (!known.count(it.key()))
            throw InputError(source + ": ." + it.key() + ": unknown key; known: name, input, layers, loss, description");
    for (const char* key : {"name", "loss", "description"})
        if (arch.contains(key) && !arch[key].is_string())
            throw InputError(source + ": ." + key + ": expected a string, got " + json_excerpt(arch[key]));
    name = arch.value("name", std::string("model"));
    if (arch.contains("input")) {
        const json& in = arch["input"];
        Shape declared;
        bool ok = in.is_array();
        for (size_t i = 0; ok && i < in.size(); ++i) {
            const json& d = in[i];  // an unsigned past int64 would wrap to a negative number: refused here
            ok = d.is_number_integer() && !(d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(kMaxSampleValues));
            if (ok) declared.push_back(d.get<int64_t>());
        }
        if (!ok || !sane_sample_shape(declared))
            throw InputError(source + ": .input: expected an array of positive integers such as [1, 28, 28] (at most " +
                             std::to_string(int64_t(kMaxSampleValues)) + " values in all), got " + json_excerpt(in));
        if (shape_numel(declared) != shape_numel(input))
            throw InputError(source + ": .input: the model expects samples of shape " + shape_string(declared) +
                             " but the data set gives " + shape_string(input) + "; pick a matching model or data set");
        input = declared;  // e.g. a flat 784 model fed 1x28x28 images
    }
    if (!arch.contains("layers") || !arch["layers"].is_array() || arch["layers"].empty())
        throw InputError(source + ": .layers: expected a non-empty array of layers");
    try {
        loss = make_loss(arch.value("loss", std::string("softmax_cross_entropy")));
    } catch (const InputError& e) {
        throw InputError(source + ": .loss: " + e.what());
    }

    Shape shape = input;
    std::set<std::string> names;
    const json& specs = arch["layers"];
    for (size_t i = 0; i < specs.size(); ++i) {
        const std::string here = source + ": .layers[" + std::to_string(i) + "]";
        auto layer = LayerRegistry::builtin().make(specs[i], here);
        std::string lname = specs[i].value("name", layer->type() + std::to_string(i));
        if (!names.insert(lname).second) throw InputError(here + ".name: duplicate layer name '" + lname + "'");
        layer->set_name(lname);
        Shape out;
        try {
            out = layer->output_shape(shape);
        } catch (const InputError& e) {
            throw InputError(here + ": " + e.what());
        }
        if (!sane_sample_shape(out))
            throw InputError(here + ": the " + layer->type() + " layer's output " + shape_string(out) +
                             " per sample is empty or more than " + std::to_string(int64_t(kMaxSampleValues)) +
                             " values; make the layer smaller");
        inputs.push_back(shape);
        where.push_back(here);
        layers.push_back(std::move(layer));
        shape = out;
    }
    output = shape;
}

Model::Model(const json& arch, const Shape& input, Rng& rng, const std::string& source) {
    Blueprint b(arch, input, source);
    name_ = std::move(b.name);
    input_ = b.input;
    output_ = b.output;
    loss_ = std::move(b.loss);
    for (size_t i = 0; i < b.layers.size(); ++i) {
        b.layers[i]->build(b.inputs[i], rng);
        layer_params_.push_back(b.layers[i]->parameters());
        for (Parameter* p : layer_params_.back()) params_.push_back(p);
        for (Parameter* p : b.layers[i]->buffers()) buffers_.push_back(p);
        layers_.push_back(std::move(b.layers[i]));
    }
    acts_.resize(layers_.size() + 1);
    grads_.resize(layers_.size() + 1);
    timings_.resize(layers_.size());
    for (size_t i = 0; i < layers_.size(); ++i) timings_[i].name = layers_[i]->name();
    plan_relu_fusion(true);
}

std::pair<int, int> Model::fused_relus() const {
    int f = 0, b = 0;
    for (char c : relu_done_forward_) f += c;
    for (char c : relu_done_backward_) b += c;
    return {f, b};
}

void Model::plan_relu_fusion(bool on) {
    const size_t n = layers_.size();
    relu_done_forward_.assign(n, 0);
    relu_done_backward_.assign(n, 0);
    auto relu = [&](size_t i) {
        const auto* a = dynamic_cast<const ActivationLayer*>(layers_[i].get());
        return on && a && a->type() == "relu";
    };
    for (size_t i = 0; i < n; ++i) {
        if (auto* c = dynamic_cast<Conv2d*>(layers_[i].get())) {
            const bool out = i + 1 < n && relu(i + 1), in = i > 0 && relu(i - 1);
            c->fuse_relu(out, in);
            if (out) relu_done_forward_[i + 1] = 1;
            if (in) relu_done_backward_[i - 1] = 1;
        } else if (auto* b = dynamic_cast<BatchNorm*>(layers_[i].get())) {
            const bool out = i + 1 < n && relu(i + 1);
            b->fuse_relu_output(out);
            if (out) relu_done_forward_[i + 1] = 1;
        } else if (auto* m = dynamic_cast<MaxPool2d*>(layers_[i].get())) {
            const bool in = i > 0 && relu(i - 1);
            m->fuse_relu_input(in);
            if (in) relu_done_backward_[i - 1] = 1;
        }
    }
}

namespace {
json read_model_file(const std::string& path) {
    return read_json_file(path, "model file", "give a path to a file under models/");
}
}  // namespace

Model Model::from_file(const std::string& path, const Shape& input, Rng& rng) {
    return Model(read_model_file(path), input, rng, path);
}

ModelFootprint Model::footprint(const std::string& path, const Shape& input) {
    const Blueprint b(read_model_file(path), input, path);
    ModelFootprint f;
    f.input = b.input;
    f.output = b.output;
    f.loss = b.loss->type();
    for (size_t i = 0; i < b.layers.size(); ++i) {
        const Shape out = b.layers[i]->output_shape(b.inputs[i]);
        f.layers.push_back({b.where[i] + " (" + b.layers[i]->type() + ")", b.layers[i]->parameter_values(b.inputs[i]),
                            double(shape_numel(out))});
    }
    return f;
}

void Model::to(Device device) {
    for (Parameter* p : params_) {
        p->value = p->value.to(device);
        p->grad = Tensor::zeros(p->value.shape(), device);
    }
    // Buffers (BatchNorm's running statistics) live beside the parameters: the ops take both on one device.
    for (Parameter* b : buffers_) b->value = b->value.to(device);
    device_ = device;
    plan_relu_fusion(device == Device::CPU);
}

int Model::set_batch_stats_reducer(BatchStatsReducer* reducer) {
    int n = 0;
    for (const auto& l : layers_)
        if (auto* bn = dynamic_cast<BatchNorm*>(l.get())) {
            bn->set_stats_reducer(reducer);
            ++n;
        }
    return n;
}

std::vector<Parameter*> Model::checkpoint_tensors() const {
    std::vector<Parameter*> t = params_;
    t.insert(t.end(), buffers_.begin(), buffers_.end());
    return t;
}

int64_t Model::parameter_count() const {
    int64_t n = 0;
    for (const Parameter* p : params_) n += p->value.numel();
    return n;
}

double Model::forward_flops_per_sample() const {
    double f = 0;
    Shape s = input_;
    for (const auto& l : layers_) {
        f += l->forward_flops(s);
        s = l->output_shape(s);
    }
    return f;
}

std::string Model::describe() const {
    std::ostringstream os;
    os << name_ << ": input " << shape_string(input_) << "\n";
    Shape s = input_;
    for (const auto& l : layers_) {
        s = l->output_shape(s);
        os << "  " << l->name() << " (" << l->type() << ") -> " << shape_string(s);
        for (const auto* p : const_cast<Layer&>(*l).parameters()) os << "  " << p->name << shape_string(p->value.shape());
        os << "\n";
    }
    os << "  loss " << loss_->type() << ", " << parameter_count() << " parameters";
    return os.str();
}

const Tensor& Model::forward(const Tensor& x, const ForwardContext& ctx) {
    Shape in{x.dim(0)};
    in.insert(in.end(), input_.begin(), input_.end());
    acts_[0] = x.reshape(in);
    const bool timed = profile_ || observer_;
    // Profiling a GPU model waits for each layer, so its time is the GPU's, not the launch's (slower, on purpose).
    const bool wait = profile_ && x.device() == Device::CUDA;
    if (wait) cuda_synchronize_default_stream();
    for (size_t i = 0; i < layers_.size(); ++i) {
        const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
        if (relu_done_forward_[i]) acts_[i + 1] = acts_[i];  // the conv2d before it applied this relu
        else layers_[i]->forward(acts_[i], acts_[i + 1], ctx);
        if (wait) cuda_synchronize_default_stream();
        if (timed) {
            const double a = seconds_of(t0), b = seconds_of(std::chrono::steady_clock::now());
            timings_[i].forward_s = b - a;
            if (observer_) observer_(layers_[i]->name(), false, a, b);
        }
    }
    return acts_.back();
}

void Model::backward(const Tensor& dlogits, const std::function<void(Parameter&)>& on_ready, bool accumulate) {
    grads_.back() = dlogits;
    const bool timed = profile_ || observer_;
    const bool wait = profile_ && dlogits.device() == Device::CUDA;
    if (wait) cuda_synchronize_default_stream();
    for (size_t i = layers_.size(); i-- > 0;) {
        const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
        // The first layer's input gradient is never needed.
        if (relu_done_backward_[i]) grads_[i] = grads_[i + 1];  // the layer after it applied this relu's backward
        else layers_[i]->backward(acts_[i], acts_[i + 1], grads_[i + 1], i == 0 ? nullptr : &grads_[i], accumulate);
        if (wait) cuda_synchronize_default_stream();
        if (timed) {
            const double a = seconds_of(t0), b = seconds_of(std::chrono::steady_clock::now());
            timings_[i].backward_s = b - a;
            if (observer_) observer_(layers_[i]->name(), true, a, b);
        }
        if (on_ready) {
            auto& ps = layer_params_[i];
            for (auto it = ps.rbegin(); it != ps.rend(); ++it) on_ready(**it);
        }
    }
}

void Model::zero_grad() {
    for (Parameter* p : params_) p->grad.zero();
}

}  // namespace ringtrain::nn

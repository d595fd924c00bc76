#include "ringtrain/nn/model.hpp"

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layer_registry.hpp"

namespace ringtrain::nn {

using nlohmann::json;

namespace {

double seconds_of(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace

Model::Model(const json& arch, const Shape& input, Rng& rng, const std::string& source) : input_(input) {
    if (!arch.is_object()) throw InputError(source + ": a model file must hold a JSON object");
    static const std::set<std::string> known{"name", "input", "layers", "loss", "description"};
    for (auto it = arch.begin(); it != arch.end(); ++it)
        if (!known.count(it.key()))
            throw InputError(source + ": ." + it.key() + ": unknown key; known: name, input, layers, loss, description");
    for (const char* key : {"name", "loss", "description"})
        if (arch.contains(key) && !arch[key].is_string())
            throw InputError(source + ": ." + key + ": expected a string, got " + arch[key].dump());
    name_ = arch.value("name", std::string("model"));
    if (arch.contains("input")) {
        Shape declared;
        try {
            declared = arch["input"].get<Shape>();
        } catch (const json::exception&) {
            throw InputError(source + ": .input: expected an array of integers such as [1, 28, 28]");
        }
        if (shape_numel(declared) != shape_numel(input))
            throw InputError(source + ": .input: the model expects samples of shape " + shape_string(declared) +
                             " but the data set gives " + shape_string(input) + "; pick a matching model or data set");
        input_ = declared;  // e.g. a flat 784 model fed 1x28x28 images
    }
    if (!arch.contains("layers") || !arch["layers"].is_array() || arch["layers"].empty())
        throw InputError(source + ": .layers: expected a non-empty array of layers");
    loss_ = make_loss(arch.value("loss", std::string("softmax_cross_entropy")));

    Shape shape = input_;
    std::set<std::string> names;
    const json& layers = arch["layers"];
    for (size_t i = 0; i < layers.size(); ++i) {
        const std::string where = source + ": .layers[" + std::to_string(i) + "]";
        auto layer = LayerRegistry::builtin().make(layers[i], where);
        std::string lname = layers[i].value("name", layer->type() + std::to_string(i));
        if (!names.insert(lname).second) throw InputError(where + ".name: duplicate layer name '" + lname + "'");
        layer->set_name(lname);
        Shape out;
        try {
            out = layer->output_shape(shape);
        } catch (const InputError& e) {
            throw InputError(where + ": " + e.what());
        }
        layer->build(shape, rng);
        shape = out;
        layer_params_.push_back(layer->parameters());
        for (Parameter* p : layer_params_.back()) params_.push_back(p);
        layers_.push_back(std::move(layer));
    }
    output_ = shape;
    acts_.resize(layers_.size() + 1);
    grads_.resize(layers_.size() + 1);
    timings_.resize(layers_.size());
    for (size_t i = 0; i < layers_.size(); ++i) timings_[i].name = layers_[i]->name();
}

Model Model::from_file(const std::string& path, const Shape& input, Rng& rng) {
    std::ifstream in(path);
    if (!in) throw InputError(path + ": model file not found; give a path to a file under models/");
    json arch;
    try {
        arch = json::parse(in);
    } catch (const json::parse_error& e) {
        throw InputError(path + ": not valid JSON: " + e.what());
    }
    return Model(arch, input, rng, path);
}

void Model::to(Device device) {
    for (Parameter* p : params_) {
        p->value = p->value.to(device);
        p->grad = Tensor::zeros(p->value.shape(), device);
    }
    device_ = device;
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
    if (wait) cuda_synchronize();
    for (size_t i = 0; i < layers_.size(); ++i) {
        const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
        layers_[i]->forward(acts_[i], acts_[i + 1], ctx);
        if (wait) cuda_synchronize();
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
    if (wait) cuda_synchronize();
    for (size_t i = layers_.size(); i-- > 0;) {
        const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
        // The first layer's input gradient is never needed.
        layers_[i]->backward(acts_[i], acts_[i + 1], grads_[i + 1], i == 0 ? nullptr : &grads_[i], accumulate);
        if (wait) cuda_synchronize();
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

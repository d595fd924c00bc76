#include "ringtrain/nn/model.hpp"

#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain::nn {

using nlohmann::json;

namespace {

// Reads the layer spec strictly: every key must be known, with the right type.
class SpecReader {
public:
    SpecReader(const json& spec, std::string where) : spec_(spec), where_(std::move(where)) {}

    int64_t integer(const std::string& key, std::optional<int64_t> fallback = std::nullopt, int64_t min = 0) {
        seen_.insert(key);
        if (!spec_.contains(key)) {
            if (fallback) return *fallback;
            throw InputError(where_ + "." + key + ": missing (required for this layer type)");
        }
        const json& v = spec_[key];
        if (!v.is_number_integer())
            throw InputError(where_ + "." + key + ": expected an integer, got " + v.dump());
        const int64_t n = v.get<int64_t>();
        if (n < min) throw InputError(where_ + "." + key + ": must be >= " + std::to_string(min) + ", got " + v.dump());
        return n;
    }
    // An integer or an [h, w] pair.
    std::pair<int64_t, int64_t> pair(const std::string& key, std::optional<int64_t> fallback, int64_t min) {
        seen_.insert(key);
        if (spec_.contains(key) && spec_[key].is_array()) {
            const json& v = spec_[key];
            if (v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() || v[0].get<int64_t>() < min ||
                v[1].get<int64_t>() < min)
                throw InputError(where_ + "." + key + ": expected an integer >= " + std::to_string(min) +
                                 " or a pair [h, w] of them, got " + v.dump());
            return {v[0].get<int64_t>(), v[1].get<int64_t>()};
        }
        const int64_t n = integer(key, fallback, min);
        return {n, n};
    }
    double number(const std::string& key, double fallback) {
        seen_.insert(key);
        if (!spec_.contains(key)) return fallback;
        if (!spec_[key].is_number()) throw InputError(where_ + "." + key + ": expected a number, got " + spec_[key].dump());
        return spec_[key].get<double>();
    }
    bool boolean(const std::string& key, bool fallback) {
        seen_.insert(key);
        if (!spec_.contains(key)) return fallback;
        if (!spec_[key].is_boolean()) throw InputError(where_ + "." + key + ": expected true or false, got " + spec_[key].dump());
        return spec_[key].get<bool>();
    }
    void finish() const {
        for (auto it = spec_.begin(); it != spec_.end(); ++it)
            if (!seen_.count(it.key()) && it.key() != "type" && it.key() != "name")
                throw InputError(where_ + "." + it.key() + ": unknown key for a " + spec_["type"].get<std::string>() +
                                 " layer");
    }

private:
    const json& spec_;
    std::string where_;
    std::set<std::string> seen_;
};

std::unique_ptr<Layer> make_layer(const json& spec, const std::string& where) {
    if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
        throw InputError(where + ": each layer must be an object with a string \"type\"");
    const std::string type = spec["type"].get<std::string>();
    static const std::map<std::string, std::set<std::string>> allowed = {
        {"linear", {"out_features", "bias"}},
        {"conv2d", {"out_channels", "kernel", "stride", "padding", "bias"}},
        {"maxpool2d", {"kernel", "stride", "padding"}},
        {"relu", {}}, {"sigmoid", {}}, {"tanh", {}}, {"dropout", {"p"}}, {"flatten", {}},
    };
    const auto known = allowed.find(type);
    if (known == allowed.end())
        throw InputError(where + ".type: unknown layer type '" + type +
                         "'; known: linear, conv2d, maxpool2d, relu, sigmoid, tanh, dropout, flatten");
    // Unknown keys first, so a misspelt required key is reported as what it is.
    for (auto it = spec.begin(); it != spec.end(); ++it)
        if (it.key() != "type" && it.key() != "name" && !known->second.count(it.key()))
            throw InputError(where + "." + it.key() + ": unknown key for a " + type + " layer");
    if (spec.contains("name") && !spec["name"].is_string())
        throw InputError(where + ".name: expected a string, got " + spec["name"].dump());
    SpecReader r(spec, where);
    std::unique_ptr<Layer> layer;
    if (type == "linear") {
        const int64_t out = r.integer("out_features", std::nullopt, 1);
        layer = std::make_unique<Linear>(out, r.boolean("bias", true));
    } else if (type == "conv2d") {
        const int64_t out = r.integer("out_channels", std::nullopt, 1);
        auto [kh, kw] = r.pair("kernel", std::nullopt, 1);
        auto [sh, sw] = r.pair("stride", 1, 1);
        auto [ph, pw] = r.pair("padding", 0, 0);
        layer = std::make_unique<Conv2d>(out, kh, kw, ops::Conv2dParams{sh, sw, ph, pw}, r.boolean("bias", true));
    } else if (type == "maxpool2d") {
        auto [kh, kw] = r.pair("kernel", std::nullopt, 1);
        auto [sh, sw] = r.pair("stride", kh, 1);
        auto [ph, pw] = r.pair("padding", 0, 0);
        layer = std::make_unique<MaxPool2d>(ops::Pool2dParams{kh, kw, sh, sw, ph, pw});
    } else if (type == "relu") {
        layer = std::make_unique<ActivationLayer>(ops::Activation::ReLU);
    } else if (type == "sigmoid") {
        layer = std::make_unique<ActivationLayer>(ops::Activation::Sigmoid);
    } else if (type == "tanh") {
        layer = std::make_unique<ActivationLayer>(ops::Activation::Tanh);
    } else if (type == "dropout") {
        const double p = r.number("p", 0.5);
        if (!(p >= 0.0 && p < 1.0)) throw InputError(where + ".p: dropout probability must be in [0, 1)");
        layer = std::make_unique<Dropout>(static_cast<float>(p));
    } else if (type == "flatten") {
        layer = std::make_unique<Flatten>();
    } else {
        throw InputError(where + ".type: unknown layer type '" + type +
                         "'; known: linear, conv2d, maxpool2d, relu, sigmoid, tanh, dropout, flatten");
    }
    r.finish();
    return layer;
}

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
        auto layer = make_layer(layers[i], where);
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

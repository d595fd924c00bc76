#include "ringtrain/nn/layer_registry.hpp"

#include <algorithm>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layers.hpp"

namespace ringtrain::nn {

using nlohmann::json;

namespace {

std::unique_ptr<Layer> make_linear(LayerSpec& s) {
    const int64_t out = s.integer("out_features", std::nullopt, 1);
    return std::make_unique<Linear>(out, s.boolean("bias", true));
}

std::unique_ptr<Layer> make_conv2d(LayerSpec& s) {
    const int64_t out = s.integer("out_channels", std::nullopt, 1);
    auto [kh, kw] = s.pair("kernel", std::nullopt, 1);
    auto [sh, sw] = s.pair("stride", 1, 1);
    auto [ph, pw] = s.pair("padding", 0, 0);
    return std::make_unique<Conv2d>(out, kh, kw, ops::Conv2dParams{sh, sw, ph, pw}, s.boolean("bias", true));
}

std::unique_ptr<Layer> make_maxpool2d(LayerSpec& s) {
    auto [kh, kw] = s.pair("kernel", std::nullopt, 1);
    auto [sh, sw] = s.pair("stride", kh, 1);  // the stride defaults to the window: non-overlapping pooling
    auto [ph, pw] = s.pair("padding", 0, 0);
    return std::make_unique<MaxPool2d>(ops::Pool2dParams{kh, kw, sh, sw, ph, pw});
}

std::unique_ptr<Layer> make_avgpool2d(LayerSpec& s) {
    auto [kh, kw] = s.pair("kernel", std::nullopt, 1);
    auto [sh, sw] = s.pair("stride", kh, 1);  // as maxpool2d: the stride defaults to the window
    auto [ph, pw] = s.pair("padding", 0, 0);
    return std::make_unique<AvgPool2d>(ops::Pool2dParams{kh, kw, sh, sw, ph, pw});
}

std::unique_ptr<Layer> make_global_avgpool(LayerSpec&) { return std::make_unique<GlobalAvgPool>(); }

template <int SpatialDims>
std::unique_ptr<Layer> make_batchnorm(LayerSpec& s) {
    const double momentum = s.number("momentum", 0.1);
    if (!(momentum >= 0.0 && momentum <= 1.0)) s.fail("momentum", "must be in [0, 1] (PyTorch's default is 0.1)");
    const double eps = s.number("eps", 1e-5);
    if (!(eps > 0.0 && eps < 1.0)) s.fail("eps", "must be in (0, 1) (PyTorch's default is 1e-5)");
    return std::make_unique<BatchNorm>(SpatialDims, static_cast<float>(momentum), static_cast<float>(eps));
}

std::unique_ptr<Layer> make_dropout(LayerSpec& s) {
    const double p = s.number("p", 0.5);
    if (!(p >= 0.0 && p < 1.0)) s.fail("p", "dropout probability must be in [0, 1)");
    return std::make_unique<Dropout>(static_cast<float>(p));
}

template <ops::Activation A>
std::unique_ptr<Layer> make_activation(LayerSpec&) {
    return std::make_unique<ActivationLayer>(A);
}

std::unique_ptr<Layer> make_flatten(LayerSpec&) { return std::make_unique<Flatten>(); }

}  // namespace

const LayerRegistry& LayerRegistry::builtin() {
    // A function-local static, as Caffe's registry: built on first use (thread-safe since C++11, so no
    // initialisation-order problem between translation units), and const once built, so it is global but not
    // mutable state. The registrations sit here rather than in each layer's file because ringtrain_nn is a static
    // library: a file that registered itself and was otherwise unreferenced would be dropped by the linker.
    static const LayerRegistry registry = [] {
        LayerRegistry r;
        r.add({"linear", {"out_features", "bias"}, make_linear});
        r.add({"conv2d", {"out_channels", "kernel", "stride", "padding", "bias"}, make_conv2d});
        r.add({"maxpool2d", {"kernel", "stride", "padding"}, make_maxpool2d});
        r.add({"avgpool2d", {"kernel", "stride", "padding"}, make_avgpool2d});
        r.add({"global_avgpool", {}, make_global_avgpool});
        r.add({"batchnorm1d", {"momentum", "eps"}, make_batchnorm<1>});
        r.add({"batchnorm2d", {"momentum", "eps"}, make_batchnorm<2>});
        r.add({"relu", {}, make_activation<ops::Activation::ReLU>});
        r.add({"sigmoid", {}, make_activation<ops::Activation::Sigmoid>});
        r.add({"tanh", {}, make_activation<ops::Activation::Tanh>});
        r.add({"dropout", {"p"}, make_dropout});
        r.add({"flatten", {}, make_flatten});
        return r;
    }();
    return registry;
}

void LayerRegistry::add(LayerType type) {
    if (find(type.name)) throw std::logic_error("LayerRegistry: layer type '" + type.name + "' registered twice");
    types_.push_back(std::move(type));
}

const LayerType* LayerRegistry::find(const std::string& name) const {
    const auto it = std::find_if(types_.begin(), types_.end(), [&](const LayerType& t) { return t.name == name; });
    return it == types_.end() ? nullptr : &*it;
}

std::string LayerRegistry::known_names() const {
    std::string names;
    for (const LayerType& t : types_) names += (names.empty() ? "" : ", ") + t.name;
    return names;
}

std::unique_ptr<Layer> LayerRegistry::make(const json& spec, const std::string& where) const {
    if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
        throw InputError(where + ": each layer must be an object with a string \"type\"");
    const std::string name = spec["type"].get<std::string>();
    const LayerType* type = find(name);
    if (!type) throw InputError(where + ".type: unknown layer type '" + name + "'; known: " + known_names());
    for (auto it = spec.begin(); it != spec.end(); ++it)
        if (it.key() != "type" && it.key() != "name" &&
            std::find(type->keys.begin(), type->keys.end(), it.key()) == type->keys.end())
            throw InputError(where + "." + it.key() + ": unknown key for a " + name + " layer");
    if (spec.contains("name") && !spec["name"].is_string())
        throw InputError(where + ".name: expected a string, got " + spec["name"].dump());
    LayerSpec reader(spec, where);
    std::unique_ptr<Layer> layer = type->make(reader);
    reader.finish();
    return layer;
}

}  // namespace ringtrain::nn

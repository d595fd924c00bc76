// LayerRegistry: the layer types a model file may name, each a name, the keys its JSON object may hold and a
// factory from that object (after Caffe's layer_factory.hpp). Model builds every layer through it, and the
// "unknown layer type ... known: ..." message is generated from it, so a new layer type (BatchNorm, pooling,
// sparse) costs its class and one registration in layer_registry.cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ringtrain/nn/layer.hpp"
#include "ringtrain/nn/layer_spec.hpp"

namespace ringtrain::nn {

struct LayerType {
    std::string name;               // the "type" value in the model file; equals the built layer's type()
    std::vector<std::string> keys;  // the keys its object may hold besides "type" and "name"
    std::function<std::unique_ptr<Layer>(LayerSpec&)> make;
};

class LayerRegistry {
public:
    // The built-in layer types, in the order the error message lists them.
    static const LayerRegistry& builtin();

    // Throws std::logic_error if a type of that name is already registered.
    void add(LayerType type);
    const LayerType* find(const std::string& name) const;  // nullptr if unknown
    // The registered names in registration order, comma-separated: "linear, conv2d, ...".
    std::string known_names() const;

    // Builds the layer `spec` describes; `where` names the object in errors (e.g. "m.json: .layers[1]").
    // InputError for a missing or unknown "type", unknown keys (checked first, so a misspelt required key is
    // reported as the key the user wrote), a non-string "name", and any bad value.
    std::unique_ptr<Layer> make(const nlohmann::json& spec, const std::string& where) const;

private:
    std::vector<LayerType> types_;  // few: a linear search is the simplest and keeps the order
};

}  // namespace ringtrain::nn

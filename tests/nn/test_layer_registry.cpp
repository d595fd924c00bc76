#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/layer_registry.hpp"
#include "ringtrain/nn/layers.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;
using nlohmann::json;

namespace {
std::string error_of(const LayerRegistry& r, const json& spec) {
    try {
        r.make(spec, "m.json: .layers[0]");
    } catch (const InputError& e) {
        return e.what();
    }
    FAIL("no InputError for " << spec.dump());
    return {};
}
}  // namespace

TEST_CASE("layer registry: the built-in types, in the order messages list them", "[nn][registry]") {
    const LayerRegistry& r = LayerRegistry::builtin();
    REQUIRE(r.known_names() == "linear, conv2d, maxpool2d, avgpool2d, global_avgpool, batchnorm1d, batchnorm2d, relu, sigmoid, tanh, "
                              "dropout, flatten");
    REQUIRE(&r == &LayerRegistry::builtin());
    REQUIRE(r.find("dense") == nullptr);
    const auto msg = error_of(r, {{"type", "dense"}});
    REQUIRE(msg == "m.json: .layers[0].type: unknown layer type 'dense'; known: " + r.known_names());
}

TEST_CASE("layer registry: every registered type builds a layer of that type", "[nn][registry]") {
    // The smallest valid object of each type (required keys only).
    const std::map<std::string, json> minimal = {
        {"linear", {{"out_features", 2}}}, {"conv2d", {{"out_channels", 1}, {"kernel", 1}}},
        {"maxpool2d", {{"kernel", 2}}},    {"relu", json::object()},
        {"sigmoid", json::object()},       {"tanh", json::object()},
        {"dropout", json::object()},       {"flatten", json::object()},
        {"avgpool2d", {{"kernel", 2}}},    {"global_avgpool", json::object()},
        {"batchnorm1d", json::object()},   {"batchnorm2d", json::object()},
    };
    const LayerRegistry& r = LayerRegistry::builtin();
    for (const auto& [name, keys] : minimal) {
        CAPTURE(name);
        json spec = keys;
        spec["type"] = name;
        const LayerType* type = r.find(name);
        REQUIRE(type != nullptr);
        for (const auto& item : keys.items())
            REQUIRE(std::count(type->keys.begin(), type->keys.end(), item.key()) == 1);
        REQUIRE(r.make(spec, "m.json: .layers[0]")->type() == name);
    }
    // Parameters reach the layer.
    const auto dropout = r.make({{"type", "dropout"}, {"p", 0.25}}, "w");
    REQUIRE(dynamic_cast<const Dropout&>(*dropout).p() == 0.25f);
}

TEST_CASE("layer registry: a new type is one registration", "[nn][registry]") {
    LayerRegistry r;
    r.add({"flat", {"unused"}, [](LayerSpec&) { return std::make_unique<Flatten>(); }});
    REQUIRE(r.known_names() == "flat");
    REQUIRE(r.make({{"type", "flat"}}, "w")->type() == "flatten");
    REQUIRE_THROWS_AS(r.add({"flat", {}, [](LayerSpec&) { return std::make_unique<Flatten>(); }}), std::logic_error);
    // A key the registration allows but the factory never reads is still reported.
    REQUIRE(error_of(r, {{"type", "flat"}, {"unused", 1}}) ==
            "m.json: .layers[0].unused: unknown key for a flat layer");
}

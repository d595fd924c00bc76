#include "ringtrain/nn/layer_spec.hpp"

#include <nlohmann/json.hpp>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/json_file.hpp"

namespace ringtrain::nn {

using nlohmann::json;

LayerSpec::LayerSpec(const json& spec, std::string where) : spec_(spec), where_(std::move(where)) {}

int64_t LayerSpec::integer(const std::string& key, std::optional<int64_t> fallback, int64_t min) {
    seen_.insert(key);
    if (!spec_.contains(key)) {
        if (fallback) return *fallback;
        fail(key, "missing (required for this layer type)");
    }
    const json& v = spec_[key];
    if (!v.is_number_integer()) fail(key, "expected an integer, got " + json_excerpt(v));
    if (!fits(v, min)) fail(key, range_text(min) + ", got " + json_excerpt(v));
    return v.get<int64_t>();
}

// Sizes reach BLAS and cuDNN as int, and products of them must not overflow int64 in shape arithmetic.
bool LayerSpec::fits(const json& v, int64_t min) {
    if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(kMaxLayerInteger);
    const int64_t n = v.get<int64_t>();
    return n >= min && n <= kMaxLayerInteger;
}

std::string LayerSpec::range_text(int64_t min) {
    return "must be an integer from " + std::to_string(min) + " to " + std::to_string(kMaxLayerInteger);
}

std::pair<int64_t, int64_t> LayerSpec::pair(const std::string& key, std::optional<int64_t> fallback, int64_t min) {
    seen_.insert(key);
    if (spec_.contains(key) && spec_[key].is_array()) {
        const json& v = spec_[key];
        if (v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() || !fits(v[0], min) ||
            !fits(v[1], min))
            fail(key, "expected an integer or a pair [h, w] of them; each " + range_text(min) + ", got " +
                          json_excerpt(v));
        return {v[0].get<int64_t>(), v[1].get<int64_t>()};
    }
    const int64_t n = integer(key, fallback, min);
    return {n, n};
}

double LayerSpec::number(const std::string& key, double fallback) {
    seen_.insert(key);
    if (!spec_.contains(key)) return fallback;
    if (!spec_[key].is_number()) fail(key, "expected a number, got " + json_excerpt(spec_[key]));
    return spec_[key].get<double>();
}

bool LayerSpec::boolean(const std::string& key, bool fallback) {
    seen_.insert(key);
    if (!spec_.contains(key)) return fallback;
    if (!spec_[key].is_boolean()) fail(key, "expected true or false, got " + json_excerpt(spec_[key]));
    return spec_[key].get<bool>();
}

void LayerSpec::fail(const std::string& key, const std::string& message) const {
    throw InputError(where_ + "." + key + ": " + message);
}

void LayerSpec::finish() const {
    for (auto it = spec_.begin(); it != spec_.end(); ++it)
        if (!seen_.count(it.key()) && it.key() != "type" && it.key() != "name")
            fail(it.key(), "unknown key for a " + spec_["type"].get<std::string>() + " layer");
}

}  // namespace ringtrain::nn

#include "sparse_model_file.hpp"

#include <filesystem>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/json_file.hpp"

namespace ringtrain::train::detail {

using nlohmann::json;

SparseModelFile read_sparse_model_file(const std::string& path) {
    const json doc = read_json_file(path, "model file", "name a model file such as models/sparse_logreg.json");
    auto fail = [&](const std::string& where, const std::string& what) {
        throw InputError(path + ": " + where + ": " + what);
    };
    if (!doc.is_object()) fail("", "a model file must be a JSON object");
    if (!doc.contains("layers") || !doc["layers"].is_array() || doc["layers"].size() != 1 ||
        !doc["layers"][0].is_object() || doc["layers"][0].value("type", json()) != "sparse_linear")
        fail(".layers", "data.format libsvm and criteo need a model whose only layer is "
                        "{\"type\": \"sparse_linear\", \"out_features\": K} (see models/sparse_logreg.json)");
    for (auto it = doc.begin(); it != doc.end(); ++it)
        if (it.key() != "name" && it.key() != "description" && it.key() != "layers" && it.key() != "loss")
            fail("." + it.key(), "unknown key for a sparse model (allowed: name, description, layers, loss; the "
                                 "feature count comes from the data)");
    const json& layer = doc["layers"][0];
    SparseModelFile m;
    for (auto it = layer.begin(); it != layer.end(); ++it) {
        const std::string key = it.key();
        if (key == "type") continue;
        if (key == "name") {
            if (!it->is_string() || it->get<std::string>().empty())
                fail(".layers[0].name", "must be a non-empty string");
            m.name = it->get<std::string>();
        } else if (key == "out_features") {
            if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 4096)
                fail(".layers[0].out_features", "must be an integer from 1 to 4096, got " + json_excerpt(*it));
            m.out_features = it->get<int64_t>();
        } else {
            fail(".layers[0]." + key, "unknown key for sparse_linear (allowed: type, name, out_features)");
        }
    }
    if (m.name.empty()) m.name = "fc";
    m.model_name = doc.contains("name") && doc["name"].is_string() ? doc["name"].get<std::string>()
                                                                   : std::filesystem::path(path).stem().string();
    const std::string fits = m.out_features == 1 ? "sigmoid_bce" : "softmax_cross_entropy";
    const json loss = doc.value("loss", json(fits));
    if (!loss.is_string() || loss.get<std::string>() != fits)
        fail(".loss", "out_features " + std::to_string(m.out_features) + " needs \"" + fits + "\", got " +
                          json_excerpt(loss));
    m.loss = fits;
    return m;
}

bool model_file_has_sparse_layer(const std::string& path) {
    json doc;
    try {
        doc = read_json_file(path, "model file", "");
    } catch (const InputError&) {
        return false;
    }
    if (!doc.is_object() || !doc.contains("layers") || !doc["layers"].is_array()) return false;
    for (const json& layer : doc["layers"])
        if (layer.is_object() && layer.value("type", json()) == "sparse_linear") return true;
    return false;
}

}  // namespace ringtrain::train::detail

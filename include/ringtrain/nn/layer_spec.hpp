// LayerSpec: a strict reader of one layer's JSON object in a model file. Every value is checked for type and range,
// and every error names the file and JSON path of the value (".layers[2].kernel: ..."), so a user can find it.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json_fwd.hpp>

namespace ringtrain::nn {

class LayerSpec {
public:
    // `where` is the path of the object in messages, e.g. "models/mlp.json: .layers[2]". `spec` must outlive this.
    LayerSpec(const nlohmann::json& spec, std::string where);

    // The largest integer a layer reads (sizes, kernels, padding): 2^31 - 1, what BLAS and cuDNN take.
    static constexpr int64_t kMaxLayerInteger = (int64_t{1} << 31) - 1;

    // A value by key; without a fallback the key is required. Each throws InputError naming where.key.
    // Integers must lie in [min, kMaxLayerInteger].
    int64_t integer(const std::string& key, std::optional<int64_t> fallback = std::nullopt, int64_t min = 0);
    // An integer n (read as [n, n]) or a pair [h, w].
    std::pair<int64_t, int64_t> pair(const std::string& key, std::optional<int64_t> fallback, int64_t min);
    double number(const std::string& key, double fallback);
    bool boolean(const std::string& key, bool fallback);

    // Throws InputError "<where>.<key>: <message>", for checks a layer makes on the values it read.
    [[noreturn]] void fail(const std::string& key, const std::string& message) const;
    // Throws if the object holds a key that was never read (besides "type" and "name").
    void finish() const;

private:
    static bool fits(const nlohmann::json& v, int64_t min);
    static std::string range_text(int64_t min);

    const nlohmann::json& spec_;
    std::string where_;
    std::set<std::string> seen_;
};

}  // namespace ringtrain::nn

#include "config_usage.hpp"

#include <algorithm>
#include <functional>
#include <optional>

#include "ringtrain/core/error.hpp"
#include "config_schema.hpp"

namespace ringtrain::train::detail {

using nlohmann::json;

namespace {

// One group of keys read only under some plans: `unused` gives the setting that leaves them unread ("data.format
// 'idx'"), or nothing when the plan reads them. `fix` says what they are for and what to do.
struct UsageRule {
    std::vector<std::string> keys;
    std::vector<std::string> deciders;  // the keys whose values decide whether `keys` are read
    std::function<std::optional<std::string>(const RunPlan&)> unused;
    std::string fix;
};

template <SpelledEnum E>
std::string setting(const char* key, E value) {
    return std::string(key) + " '" + to_string(value) + "'";
}

std::optional<std::string> unless(bool used, std::string context) {
    if (used) return std::nullopt;
    return context;
}

std::vector<UsageRule> rules() {
    const auto format = [](const RunPlan& p) { return setting("data.format", p.data.format); };
    const auto on_format = [format](auto pred) {
        return [format, pred](const RunPlan& p) { return unless(pred(p.data.format), format(p)); };
    };
    const auto dense = on_format([](DataFormat f) { return f != DataFormat::Libsvm && f != DataFormat::Criteo; });
    const auto sparse = on_format([](DataFormat f) { return f == DataFormat::Libsvm || f == DataFormat::Criteo; });
    const auto optimizer_is = [](std::initializer_list<OptimizerName> names) {
        const std::vector<OptimizerName> v(names);
        return [v](const RunPlan& p) {
            return unless(std::find(v.begin(), v.end(), p.optimizer.name) != v.end(),
                          setting("optimizer.name", p.optimizer.name));
        };
    };
    const auto schedule_is = [](Schedule s) {
        return [s](const RunPlan& p) {
            return unless(p.optimizer.schedule == s, setting("optimizer.schedule", p.optimizer.schedule));
        };
    };
    // Gradient buckets: dense models averaging gradients every step.
    const auto allreduce_buckets = [format](const RunPlan& p) -> std::optional<std::string> {
        if (p.data.is_sparse()) return format(p);
        if (p.sync.mode != SyncMode::Allreduce) return setting("sync.mode", p.sync.mode);
        return std::nullopt;
    };
    // Buckets cut by when gradients become ready: with overlap, on fused buckets (GradientSync's relayout).
    const auto timed_buckets = [allreduce_buckets](const RunPlan& p) -> std::optional<std::string> {
        if (auto why = allreduce_buckets(p)) return why;
        if (!p.sync.overlap) return std::string("sync.overlap false");
        if (p.sync.fusion_bytes == 0) return std::string("sync.fusion_bytes 0");
        return std::nullopt;
    };
    const std::vector<std::string> format_key{"data.format"};
    const std::vector<std::string> optimizer_key{"optimizer.name"};
    const std::vector<std::string> schedule_key{"optimizer.schedule"};
    const std::vector<std::string> bucket_keys{"data.format", "sync.mode", "sync.overlap", "sync.fusion_bytes"};
    return {
        {{"data.dir"}, format_key,
         on_format([](DataFormat f) { return f == DataFormat::Idx || f == DataFormat::Cifar10; }),
         "it is the folder of data.format idx and cifar10 (image_folder reads data.train_dir and data.test_dir, "
         "libsvm and criteo data.train_file and data.test_file); remove it"},
        {{"data.synthetic_train_size", "data.synthetic_test_size", "data.synthetic_shape", "data.synthetic_classes"},
         format_key, on_format([](DataFormat f) { return f == DataFormat::Synthetic; }),
         "it shapes data.format synthetic's samples; remove it"},
        {{"data.train_file", "data.test_file", "data.shuffle_buffer"}, format_key, sparse,
         "it is for the click-log formats, libsvm and criteo (an image folder reads data.train_dir and "
         "data.test_dir); remove it"},
        {{"data.index_base", "data.num_features"}, format_key,
         on_format([](DataFormat f) { return f == DataFormat::Libsvm; }), "it is for data.format libsvm; remove it"},
        {{"data.hash_bits", "data.criteo_integers"}, format_key,
         on_format([](DataFormat f) { return f == DataFormat::Criteo; }), "it is for data.format criteo; remove it"},
        {{"data.workers", "data.prefetch"}, format_key, dense,
         "the click-log reader does not use it (each rank parses its share of the file as it trains); remove it"},
        {{"train.threads"}, format_key, dense,
         "the sparse path runs one thread per rank; start more ranks instead, and remove it"},
        {{"train.cpu_conv", "train.profile_layers", "sync.batchnorm"}, format_key, dense,
         "it is for dense models; the sparse path's model is one sparse_linear layer (its time split is "
         "summary.json's phase_s); remove it"},
        {{"sync.fusion_bytes"}, format_key, dense,
         "sparse gradient rows are combined as sync.sparse says, not in fused buckets; remove it"},
        {{"sync.sparse"}, format_key, sparse, "it is for the click-log formats, libsvm and criteo; remove it"},
        {{"sync.sparse_update"}, {"data.format", "sync.mode"},
         [format](const RunPlan& p) -> std::optional<std::string> {
             if (!p.data.is_sparse()) return format(p);
             if (p.sync.mode != SyncMode::Allreduce) return setting("sync.mode", p.sync.mode);
             return std::nullopt;
         },
         "it says who updates which rows when libsvm or criteo gradients are allreduced every step; remove it"},
        {{"sync.overlap"}, {"data.format", "sync.mode"}, allreduce_buckets,
         "it overlaps the gradient allreduces of a dense model with its backward pass; remove it"},
        {{"sync.cycle_time_ms"}, bucket_keys, timed_buckets,
         "it cuts gradient buckets by when they become ready, which needs sync.overlap true and sync.fusion_bytes "
         "above 0; remove it"},
        {{"sync.min_bucket_bytes"}, {"data.format", "sync.mode", "sync.overlap", "sync.fusion_bytes",
                                      "sync.cycle_time_ms"},
         [timed_buckets](const RunPlan& p) -> std::optional<std::string> {
             if (auto why = timed_buckets(p)) return why;
             if (p.sync.cycle_time_ms == 0.0) return std::string("sync.cycle_time_ms 0");
             return std::nullopt;
         },
         "it is the smallest bucket that sync.cycle_time_ms may close; remove it"},
        {{"optimizer.momentum", "optimizer.nesterov"}, optimizer_key, optimizer_is({OptimizerName::Sgd}),
         "it is SGD's momentum; remove it, or set optimizer.name to sgd"},
        {{"optimizer.beta1", "optimizer.beta2"}, optimizer_key, optimizer_is({OptimizerName::Adam}),
         "it is Adam's; remove it, or set optimizer.name to adam"},
        {{"optimizer.rho"}, optimizer_key, optimizer_is({OptimizerName::Adadelta}),
         "it is Adadelta's decay; remove it, or set optimizer.name to adadelta"},
        {{"optimizer.eps"}, optimizer_key,
         optimizer_is({OptimizerName::Adam, OptimizerName::Adadelta, OptimizerName::Adagrad}),
         "it is Adam's, Adadelta's and AdaGrad's; remove it"},
        {{"optimizer.l1", "optimizer.l2", "optimizer.beta"}, optimizer_key, optimizer_is({OptimizerName::Ftrl}),
         "it is FTRL's; remove it, or set optimizer.name to ftrl"},
        {{"optimizer.initial_accumulator"}, optimizer_key, optimizer_is({OptimizerName::Adagrad}),
         "it is AdaGrad's; remove it, or set optimizer.name to adagrad"},
        {{"optimizer.step_epochs", "optimizer.gamma"}, schedule_key, schedule_is(Schedule::Step),
         "it is the step schedule's; remove it, or set optimizer.schedule to step"},
        {{"optimizer.min_lr_factor"}, schedule_key, schedule_is(Schedule::Cosine),
         "it is the cosine schedule's; remove it, or set optimizer.schedule to cosine"},
        {{"optimizer.warmup_start_lr"}, {"optimizer.warmup_epochs"},
         [](const RunPlan& p) { return unless(p.optimizer.warmup_epochs > 0.0, "optimizer.warmup_epochs 0"); },
         "it is where the warmup starts; remove it, or set optimizer.warmup_epochs above 0"},
    };
}

}  // namespace

std::vector<std::string> check_unused_keys(const KeyOrigin& origin, const RunPlan& plan, const json& doc) {
    std::vector<std::string> notes;
    for (const UsageRule& rule : rules()) {
        const std::optional<std::string> context = rule.unused(plan);
        if (!context) continue;
        for (const std::string& key : rule.keys) {
            // Its default given back is harmless (a resolved config saved from a run holds every key).
            std::string ptr = "/" + key;
            std::replace(ptr.begin(), ptr.end(), '.', '/');
            if (!origin.given(key) || doc.at(json::json_pointer(ptr)) == schema().at(key).fallback) continue;
            const auto set_decider = std::find_if(rule.deciders.begin(), rule.deciders.end(),
                                                  [&](const std::string& d) { return origin.from_set(d); });
            if (!origin.from_set(key) && set_decider != rule.deciders.end()) {
                notes.push_back(key + " in " + origin.file() + " is not used with " + *context + " (" +
                                origin(*set_decider) + "); it is ignored in this run");
                continue;
            }
            throw InputError(origin(key) + ": " + key + ": not used with " + *context + "; " + rule.fix);
        }
    }
    return notes;
}

}  // namespace ringtrain::train::detail

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
// 'idx'"), or nothing when the plan reads them. `fix` says what they are for and what to do. A value in `neutral`
// (besides the schema's default) asks for what the run does anyway (sync.cycle_time_ms 0 = buckets by size).
struct UsageRule {
    std::vector<std::string> keys;
    std::vector<std::string> deciders;  // the keys whose values decide whether `keys` are read
    std::function<std::optional<std::string>(const RunPlan&)> unused;
    std::string fix;
    std::vector<json> neutral = {};
};

template <SpelledEnum E>
std::string setting(const char* key, E value) {
    return std::string(key) + " '" + to_string(value) + "'";
}

std::optional<std::string> unless(bool used, std::string context) {
    if (used) return std::nullopt;
    return context;
}

bool sparse_format(DataFormat f) { return f == DataFormat::Libsvm || f == DataFormat::Criteo; }

std::vector<UsageRule> rules() {
    const auto format = [](const RunPlan& p) { return setting("data.format", p.data.format); };
    const auto on_format = [format](auto pred) {
        return [format, pred](const RunPlan& p) { return unless(pred(p.data.format), format(p)); };
    };
    const auto dense = on_format([](DataFormat f) { return !sparse_format(f); });
    const auto sparse = on_format([](DataFormat f) { return sparse_format(f); });
    const auto images = on_format([](DataFormat f) { return f == DataFormat::ImageFolder || f == DataFormat::Cifar10; });
    const auto folder = on_format([](DataFormat f) { return f == DataFormat::ImageFolder; });
    // A dense model whose optimizer is one of `names` (the sparse path has its own optimizers' keys).
    const auto dense_optimizer = [format](std::initializer_list<OptimizerName> names) {
        const std::vector<OptimizerName> v(names);
        return [v, format](const RunPlan& p) -> std::optional<std::string> {
            if (p.data.is_sparse()) return format(p);
            return unless(std::find(v.begin(), v.end(), p.optimizer.name) != v.end(),
                          setting("optimizer.name", p.optimizer.name));
        };
    };
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
    // Dense models averaging gradients every step (GradientSync: buckets, overlap, compression, balance).
    const auto dense_allreduce = [format](const RunPlan& p) -> std::optional<std::string> {
        if (p.data.is_sparse()) return format(p);
        if (p.sync.mode != SyncMode::Allreduce) return setting("sync.mode", p.sync.mode);
        return std::nullopt;
    };
    // Click-log models combining gradients every step (SparseGradientSync).
    const auto sparse_allreduce = [format](const RunPlan& p) -> std::optional<std::string> {
        if (!p.data.is_sparse()) return format(p);
        if (p.sync.mode != SyncMode::Allreduce) return setting("sync.mode", p.sync.mode);
        return std::nullopt;
    };
    // Buckets cut by when gradients become ready: with overlap, on fused buckets (GradientSync's relayout).
    const auto timed_buckets = [dense_allreduce](const RunPlan& p) -> std::optional<std::string> {
        if (auto why = dense_allreduce(p)) return why;
        if (!p.sync.overlap) return std::string("sync.overlap false");
        if (p.sync.fusion_bytes == 0) return std::string("sync.fusion_bytes 0");
        return std::nullopt;
    };
    const std::vector<std::string> by_format{"data.format"};
    const std::vector<std::string> by_optimizer{"optimizer.name"};
    const std::vector<std::string> by_format_and_optimizer{"data.format", "optimizer.name"};
    const std::vector<std::string> by_schedule{"optimizer.schedule"};
    const std::vector<std::string> by_format_and_mode{"data.format", "sync.mode"};
    const std::vector<std::string> by_buckets{"data.format", "sync.mode", "sync.overlap", "sync.fusion_bytes"};
    const std::string folder_only = "it is for image folders (data.format image_folder); remove it";
    return {
        // ---- data ----
        {{"data.dir"}, by_format,
         on_format([](DataFormat f) { return f == DataFormat::Idx || f == DataFormat::Cifar10; }),
         "it is the folder of data.format idx and cifar10 (image_folder reads data.train_dir and data.test_dir, "
         "libsvm and criteo data.train_file and data.test_file); remove it"},
        {{"data.mean", "data.std"}, by_format,
         on_format([](DataFormat f) {
             return f == DataFormat::Idx || f == DataFormat::Cifar10 || f == DataFormat::ImageFolder;
         }),
         "its samples are not normalised; remove it"},
        {{"data.synthetic_train_size", "data.synthetic_test_size", "data.synthetic_shape", "data.synthetic_classes"},
         by_format, on_format([](DataFormat f) { return f == DataFormat::Synthetic; }),
         "it shapes data.format synthetic's samples; remove it"},
        {{"data.train_file", "data.test_file"}, by_format, sparse,
         "it is the click log of data.format libsvm and criteo (an image folder reads data.train_dir and "
         "data.test_dir); remove it"},
        {{"data.shuffle_buffer"}, by_format, sparse,
         "it shuffles click-log rows in memory (the other formats shuffle every epoch by themselves); remove it"},
        {{"data.index_base", "data.num_features"}, by_format,
         on_format([](DataFormat f) { return f == DataFormat::Libsvm; }), "it is for data.format libsvm; remove it"},
        {{"data.hash_bits", "data.criteo_integers"}, by_format,
         on_format([](DataFormat f) { return f == DataFormat::Criteo; }), "it is for data.format criteo; remove it"},
        {{"data.train_dir", "data.test_dir", "data.skip_bad_files"}, by_format, folder, folder_only},
        {{"data.image_size", "data.channels"}, by_format, images,
         "it is for image folders (data.format image_folder; cifar10 takes [32, 32] and 3 only); remove it"},
        {{"data.augment.random_crop_padding", "data.augment.hflip", "data.augment.random_resized_crop"}, by_format,
         images, "augmentation runs on data.format image_folder and cifar10; remove it"},
        {{"data.cache"}, by_format,
         on_format([](DataFormat f) { return f == DataFormat::ImageFolder || sparse_format(f); }),
         "its samples are held in memory already (data.cache keeps decoded images of an image folder, or parsed "
         "click-log rows); remove it"},
        {{"data.workers", "data.prefetch"}, by_format, dense,
         "the click-log reader does not use it (each rank parses its own share of the file, on a parse thread of "
         "its own); remove it"},
        // ---- train ----
        {{"train.threads"}, by_format, dense,
         "it sets the threads of the dense ops (convolutions, matrix products), which the sparse path has none of; "
         "start more ranks instead, and remove it"},
        {{"train.cpu_conv"}, {"data.format", "device"},
         [format](const RunPlan& p) -> std::optional<std::string> {
             if (p.data.is_sparse()) return format(p);
             // device auto may land on a CPU node with the same config; an explicit cuda never runs a CPU conv.
             if (p.device == DeviceChoice::Cuda) return setting("device", p.device);
             return std::nullopt;
         },
         "it picks the CPU convolutions of a dense model; remove it"},
        {{"train.cpu_precision"}, by_format, dense,
         "the sparse model has no convolution or linear layer to run in bf16; remove it"},
        {{"train.profile_layers"}, by_format, dense,
         "the sparse model is one layer, whose time split is summary.json's phase_s; remove it"},
        // ---- optimizer ----
        {{"optimizer.momentum", "optimizer.nesterov"}, by_format_and_optimizer,
         dense_optimizer({OptimizerName::Sgd}),
         "it is dense SGD's momentum (the sparse optimizers update only the rows a step touched: use adagrad or "
         "ftrl there); remove it"},
        {{"optimizer.weight_decay", "optimizer.warmup_epochs"}, by_format, dense,
         "the sparse path has no weight decay (ftrl has optimizer.l2) and sets the rate once per epoch; remove it"},
        {{"optimizer.beta1", "optimizer.beta2"}, by_format_and_optimizer, dense_optimizer({OptimizerName::Adam}),
         "it is Adam's (dense models); remove it"},
        {{"optimizer.rho"}, by_format_and_optimizer, dense_optimizer({OptimizerName::Adadelta}),
         "it is Adadelta's decay (dense models); remove it"},
        {{"optimizer.eps"}, by_optimizer,
         optimizer_is({OptimizerName::Adam, OptimizerName::Adadelta, OptimizerName::Adagrad}),
         "it is Adam's and Adadelta's (dense models) and AdaGrad's (click logs); remove it"},
        {{"optimizer.l1", "optimizer.l2", "optimizer.beta"}, by_optimizer, optimizer_is({OptimizerName::Ftrl}),
         "it is FTRL's (click logs: data.format libsvm or criteo); remove it"},
        {{"optimizer.initial_accumulator"}, by_optimizer, optimizer_is({OptimizerName::Adagrad}),
         "it is AdaGrad's (click logs: data.format libsvm or criteo); remove it"},
        {{"optimizer.step_epochs", "optimizer.gamma"}, by_schedule, schedule_is(Schedule::Step),
         "it is the step schedule's; remove it, or set optimizer.schedule to step"},
        {{"optimizer.min_lr_factor"}, by_schedule, schedule_is(Schedule::Cosine),
         "it is the cosine schedule's; remove it, or set optimizer.schedule to cosine"},
        {{"optimizer.warmup_start_lr"}, {"data.format", "optimizer.warmup_epochs"},
         [format](const RunPlan& p) -> std::optional<std::string> {
             if (p.data.is_sparse()) return format(p);
             return unless(p.optimizer.warmup_epochs > 0.0, "optimizer.warmup_epochs 0");
         },
         "it is where the warmup starts; remove it, or set optimizer.warmup_epochs above 0"},
        // ---- sync ----
        {{"sync.local_sgd_period"}, {"sync.mode"},
         [](const RunPlan& p) { return unless(p.sync.mode == SyncMode::LocalSgd, setting("sync.mode", p.sync.mode)); },
         "it is local SGD's averaging period (this run averages gradients every step); remove it, or set sync.mode "
         "to local_sgd"},
        {{"sync.fusion_bytes", "sync.batchnorm", "sync.backward_passes_per_step"}, by_format, dense,
         "it is for dense models (sparse gradient rows are combined as sync.sparse says, every step; raise "
         "train.batch_size for larger steps); remove it"},
        {{"sync.compression", "sync.balance"}, by_format_and_mode, dense_allreduce,
         "it acts on the gradients a dense model averages every step (local SGD's parameter averages travel in "
         "float32 and its ranks do not wait for each other each step); remove it"},
        {{"sync.overlap"}, by_format_and_mode, dense_allreduce,
         "it overlaps the gradient allreduces of a dense model with its backward pass; remove it"},
        {{"sync.cycle_time_ms"}, by_buckets, timed_buckets,
         "it cuts gradient buckets by when they become ready, which needs sync.overlap true and sync.fusion_bytes "
         "above 0; remove it (0 = by size only)",
         {0.0}},
        {{"sync.min_bucket_bytes"},
         {"data.format", "sync.mode", "sync.overlap", "sync.fusion_bytes", "sync.cycle_time_ms"},
         [timed_buckets](const RunPlan& p) -> std::optional<std::string> {
             if (auto why = timed_buckets(p)) return why;
             if (p.sync.cycle_time_ms == 0.0) return std::string("sync.cycle_time_ms 0");
             return std::nullopt;
         },
         "it is the smallest bucket that sync.cycle_time_ms may close; remove it"},
        {{"sync.sparse"}, by_format_and_mode, sparse_allreduce,
         "it picks how click-log gradients are combined every step (local SGD averages the tables instead); remove "
         "it"},
        {{"sync.sparse_update"}, by_format_and_mode, sparse_allreduce,
         "it says who updates which rows when click-log gradients are combined every step; remove it"},
        // ---- output ----
        {{"output.timeline"}, by_format, dense,
         "the sparse path records no timeline (its time split is summary.json's phase_s); remove it"},
    };
}

std::string pointer_of(const std::string& key) {
    std::string ptr = "/" + key;
    std::replace(ptr.begin(), ptr.end(), '.', '/');
    return ptr;
}

}  // namespace

std::vector<UnreadKey> check_unused_keys(const KeyOrigin& origin, const RunPlan& plan, const json& doc,
                                         const RunPlan* file_plan) {
    std::vector<UnreadKey> unread;
    for (const UsageRule& rule : rules()) {
        const std::optional<std::string> context = rule.unused(plan);
        if (!context) continue;
        for (const std::string& key : rule.keys) {
            // Its default given back is harmless (a resolved config saved from a run holds every key).
            const json& v = doc.at(json::json_pointer(pointer_of(key)));
            if (!origin.given(key) || v == schema().at(key).fallback ||
                std::find(rule.neutral.begin(), rule.neutral.end(), v) != rule.neutral.end())
                continue;
            // In the file, read under the file's own settings, unread only because a --set changed one of them (a
            // sweep varying optimizer.name or data.format over one file): a note. Anything else is a mistake.
            if (!origin.from_set(key) && file_plan && !rule.unused(*file_plan)) {
                std::string sets;
                for (const std::string& d : rule.deciders)
                    if (origin.from_set(d)) sets += (sets.empty() ? "" : ", ") + origin(d);
                unread.push_back({key, key + " in " + origin.file() + " is not used with " + *context + " (" + sets +
                                           "); it is ignored in this run"});
                continue;
            }
            throw InputError(origin(key) + ": " + key + ": not used with " + *context + "; " + rule.fix);
        }
    }
    return unread;
}

}  // namespace ringtrain::train::detail

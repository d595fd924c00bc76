#include "config_usage.hpp"

#include <algorithm>
#include <functional>
#include <iterator>
#include <optional>

#include "ringtrain/core/error.hpp"
#include "config_schema.hpp"

namespace ringtrain::train::detail {

using nlohmann::json;

namespace {

// What leaves a rule's keys unread under a plan: the setting that does ("data.format 'idx'"), or nothing when the
// plan reads them.
using Unused = std::function<std::optional<std::string>(const RunPlan&)>;

// One group of keys read only under some plans. `fix` says what they are for and what to do. A value in `neutral`
// (besides the schema's default) asks for what the run does anyway (sync.cycle_time_ms 0 = buckets by size).
struct UsageRule {
    std::vector<std::string> keys;
    std::vector<std::string> deciders;  // the keys whose values decide whether `keys` are read
    Unused unused;
    std::string fix;
    std::vector<json> neutral = {};
};
using UsageRules = std::vector<UsageRule>;

template <SpelledEnum E>
std::string setting(const char* key, E value) {
    return std::string(key) + " '" + to_string(value) + "'";
}

std::optional<std::string> unless(bool used, std::string context) {
    if (used) return std::nullopt;
    return context;
}

// ---- the conditions ----

const std::vector<DataFormat> kDenseFormats{DataFormat::Idx, DataFormat::Synthetic, DataFormat::Cifar10,
                                            DataFormat::ImageFolder};
const std::vector<DataFormat> kClickLogs{DataFormat::Libsvm, DataFormat::Criteo};

// Read under these formats only.
Unused format_is(std::vector<DataFormat> used) {
    return [used](const RunPlan& p) {
        return unless(std::find(used.begin(), used.end(), p.data.format) != used.end(),
                      setting("data.format", p.data.format));
    };
}

Unused optimizer_is(std::vector<OptimizerName> used) {
    return [used](const RunPlan& p) {
        return unless(std::find(used.begin(), used.end(), p.optimizer.name) != used.end(),
                      setting("optimizer.name", p.optimizer.name));
    };
}

// A dense model whose optimizer is one of `used` (the sparse path has its own optimizers' keys).
Unused dense_optimizer_is(std::vector<OptimizerName> used) {
    return [used](const RunPlan& p) {
        if (auto why = format_is(kDenseFormats)(p)) return why;
        return optimizer_is(used)(p);
    };
}

Unused schedule_is(Schedule s) {
    return [s](const RunPlan& p) {
        return unless(p.optimizer.schedule == s, setting("optimizer.schedule", p.optimizer.schedule));
    };
}

// Models averaging gradients every step, dense (GradientSync) or click logs (SparseGradientSync).
Unused every_step_on(std::vector<DataFormat> formats) {
    return [formats](const RunPlan& p) {
        if (auto why = format_is(formats)(p)) return why;
        return unless(p.sync.mode == SyncMode::Allreduce, setting("sync.mode", p.sync.mode));
    };
}

// Buckets cut by when gradients become ready: with overlap, on fused buckets (GradientSync's relayout); with
// `by_time_only`, also only where a cycle time is set (the smallest bucket it may close).
Unused timed_buckets(bool by_time_only) {
    return [by_time_only](const RunPlan& p) -> std::optional<std::string> {
        if (auto why = every_step_on(kDenseFormats)(p)) return why;
        if (!p.sync.overlap) return std::string("sync.overlap false");
        if (p.sync.fusion_bytes == 0) return std::string("sync.fusion_bytes 0");
        if (by_time_only && p.sync.cycle_time_ms == 0.0) return std::string("sync.cycle_time_ms 0");
        return std::nullopt;
    };
}

// A dense model on the CPU: device auto may land on a CPU node with the same config; an explicit cuda never does.
std::optional<std::string> dense_on_cpu(const RunPlan& p) {
    if (auto why = format_is(kDenseFormats)(p)) return why;
    return unless(p.device != DeviceChoice::Cuda, setting("device", p.device));
}

std::optional<std::string> dense_warmup(const RunPlan& p) {
    if (auto why = format_is(kDenseFormats)(p)) return why;
    return unless(p.optimizer.warmup_epochs > 0.0, "optimizer.warmup_epochs 0");
}

std::optional<std::string> local_sgd(const RunPlan& p) {
    return unless(p.sync.mode == SyncMode::LocalSgd, setting("sync.mode", p.sync.mode));
}

// ---- the rules, one list per section ----

const std::vector<std::string> kByFormat{"data.format"};
const std::vector<std::string> kByOptimizer{"optimizer.name"};
const std::vector<std::string> kByFormatAndOptimizer{"data.format", "optimizer.name"};
const std::vector<std::string> kBySchedule{"optimizer.schedule"};
const std::vector<std::string> kByFormatAndMode{"data.format", "sync.mode"};
const std::vector<std::string> kByBuckets{"data.format", "sync.mode", "sync.overlap", "sync.fusion_bytes"};

UsageRules data_rules() {
    const Unused dense = format_is(kDenseFormats), click_logs = format_is(kClickLogs);
    const Unused images = format_is({DataFormat::ImageFolder, DataFormat::Cifar10});
    return {
        {{"data.dir"}, kByFormat, format_is({DataFormat::Idx, DataFormat::Cifar10}),
         "it is the folder of data.format idx and cifar10 (image_folder reads data.train_dir and data.test_dir, "
         "libsvm and criteo data.train_file and data.test_file); remove it"},
        {{"data.mean", "data.std"}, kByFormat, format_is({DataFormat::Idx, DataFormat::Cifar10, DataFormat::ImageFolder}),
         "its samples are not normalised; remove it"},
        {{"data.synthetic_train_size", "data.synthetic_test_size", "data.synthetic_shape", "data.synthetic_classes"},
         kByFormat, format_is({DataFormat::Synthetic}), "it shapes data.format synthetic's samples; remove it"},
        {{"data.train_file", "data.test_file"}, kByFormat, click_logs,
         "it is the click log of data.format libsvm and criteo (an image folder reads data.train_dir and "
         "data.test_dir); remove it"},
        {{"data.shuffle_buffer"}, kByFormat, click_logs,
         "it shuffles click-log rows in memory (the other formats shuffle every epoch by themselves); remove it"},
        {{"data.index_base", "data.num_features"}, kByFormat, format_is({DataFormat::Libsvm}),
         "it is for data.format libsvm; remove it"},
        {{"data.hash_bits", "data.criteo_integers"}, kByFormat, format_is({DataFormat::Criteo}),
         "it is for data.format criteo; remove it"},
        {{"data.train_dir", "data.test_dir", "data.skip_bad_files"}, kByFormat, format_is({DataFormat::ImageFolder}),
         "it is for image folders (data.format image_folder); remove it"},
        {{"data.image_size", "data.channels"}, kByFormat, images,
         "it is for image folders (data.format image_folder; cifar10 takes [32, 32] and 3 only); remove it"},
        {{"data.augment.random_crop_padding", "data.augment.hflip", "data.augment.random_resized_crop"}, kByFormat,
         images, "augmentation runs on data.format image_folder and cifar10; remove it"},
        {{"data.cache"}, kByFormat, format_is({DataFormat::ImageFolder, DataFormat::Libsvm, DataFormat::Criteo}),
         "its samples are held in memory already (data.cache keeps decoded images of an image folder, or parsed "
         "click-log rows); remove it"},
        {{"data.workers", "data.prefetch"}, kByFormat, dense,
         "the click-log reader does not use it (each rank parses its own share of the file, on a parse thread of "
         "its own); remove it"},
    };
}

UsageRules train_rules() {
    const Unused dense = format_is(kDenseFormats);
    return {
        {{"train.threads"}, kByFormat, dense,
         "it sets the threads of the dense ops (convolutions, matrix products), which the sparse path has none of; "
         "start more ranks instead, and remove it"},
        {{"train.cpu_conv"}, {"data.format", "device"}, dense_on_cpu,
         "it picks the CPU convolutions of a dense model; remove it"},
        {{"train.cpu_precision"}, kByFormat, dense,
         "the sparse model has no convolution or linear layer to run in bf16; remove it"},
        {{"train.profile_layers"}, kByFormat, dense,
         "the sparse model is one layer, whose time split is summary.json's phase_s; remove it"},
    };
}

UsageRules optimizer_rules() {
    return {
        {{"optimizer.momentum", "optimizer.nesterov"}, kByFormatAndOptimizer, dense_optimizer_is({OptimizerName::Sgd}),
         "it is SGD's momentum, for optimizer.name sgd on a dense model (adam, adadelta and the sparse path's "
         "adagrad and ftrl have none); remove it, or use sgd"},
        {{"optimizer.weight_decay", "optimizer.warmup_epochs"}, kByFormat, format_is(kDenseFormats),
         "the sparse path has no weight decay (ftrl has optimizer.l2) and sets the rate once per epoch; remove it"},
        {{"optimizer.beta1", "optimizer.beta2"}, kByFormatAndOptimizer, dense_optimizer_is({OptimizerName::Adam}),
         "it is Adam's (dense models); remove it"},
        {{"optimizer.rho"}, kByFormatAndOptimizer, dense_optimizer_is({OptimizerName::Adadelta}),
         "it is Adadelta's decay (dense models); remove it"},
        {{"optimizer.eps"}, kByOptimizer,
         optimizer_is({OptimizerName::Adam, OptimizerName::Adadelta, OptimizerName::Adagrad}),
         "it is Adam's and Adadelta's (dense models) and AdaGrad's (click logs); remove it"},
        {{"optimizer.l1", "optimizer.l2", "optimizer.beta"}, kByOptimizer, optimizer_is({OptimizerName::Ftrl}),
         "it is FTRL's (click logs: data.format libsvm or criteo); remove it"},
        {{"optimizer.initial_accumulator"}, kByOptimizer, optimizer_is({OptimizerName::Adagrad}),
         "it is AdaGrad's (click logs: data.format libsvm or criteo); remove it"},
        {{"optimizer.step_epochs", "optimizer.gamma"}, kBySchedule, schedule_is(Schedule::Step),
         "it is the step schedule's; remove it, or set optimizer.schedule to step"},
        {{"optimizer.min_lr_factor"}, kBySchedule, schedule_is(Schedule::Cosine),
         "it is the cosine schedule's; remove it, or set optimizer.schedule to cosine"},
        {{"optimizer.warmup_start_lr"}, {"data.format", "optimizer.warmup_epochs"}, dense_warmup,
         "it is where the warmup starts; remove it, or set optimizer.warmup_epochs above 0"},
    };
}

UsageRules sync_and_output_rules() {
    const Unused dense_allreduce = every_step_on(kDenseFormats), sparse_allreduce = every_step_on(kClickLogs);
    return {
        {{"sync.local_sgd_period"}, {"sync.mode"}, local_sgd,
         "it is local SGD's averaging period (this run averages gradients every step); remove it, or set sync.mode "
         "to local_sgd"},
        {{"sync.fusion_bytes", "sync.batchnorm", "sync.backward_passes_per_step"}, kByFormat, format_is(kDenseFormats),
         "it is for dense models (sparse gradient rows are combined as sync.sparse says, every step; raise "
         "train.batch_size for larger steps); remove it"},
        {{"sync.compression", "sync.balance"}, kByFormatAndMode, dense_allreduce,
         "it acts on the gradients a dense model averages every step (local SGD's parameter averages travel in "
         "float32 and its ranks do not wait for each other each step); remove it"},
        {{"sync.overlap"}, kByFormatAndMode, dense_allreduce,
         "it overlaps the gradient allreduces of a dense model with its backward pass; remove it"},
        {{"sync.cycle_time_ms"}, kByBuckets, timed_buckets(false),
         "it cuts gradient buckets by when they become ready, which needs sync.overlap true and sync.fusion_bytes "
         "above 0; remove it (0 = by size only)",
         {0.0}},
        {{"sync.min_bucket_bytes"},
         {"data.format", "sync.mode", "sync.overlap", "sync.fusion_bytes", "sync.cycle_time_ms"}, timed_buckets(true),
         "it is the smallest bucket that sync.cycle_time_ms may close; remove it"},
        {{"sync.sparse"}, kByFormatAndMode, sparse_allreduce,
         "it picks how click-log gradients are combined every step (local SGD averages the tables instead); remove "
         "it"},
        {{"sync.sparse_update"}, kByFormatAndMode, sparse_allreduce,
         "it says who updates which rows when click-log gradients are combined every step; remove it"},
        {{"output.timeline"}, kByFormat, format_is(kDenseFormats),
         "the sparse path records no timeline (its time split is summary.json's phase_s); remove it"},
    };
}

// Every rule, built once.
const UsageRules& rules() {
    static const UsageRules all = [] {
        UsageRules r;
        for (UsageRules part : {data_rules(), train_rules(), optimizer_rules(), sync_and_output_rules()})
            r.insert(r.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
        return r;
    }();
    return all;
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

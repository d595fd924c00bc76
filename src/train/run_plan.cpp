#include "ringtrain/train/run_plan.hpp"

#include "ringtrain/core/error.hpp"
#include "ringtrain/train/config.hpp"

namespace ringtrain::train {

using nlohmann::json;

namespace {

// The schema has checked the spelling already; a miss here means the schema and Spelling<E> disagree.
template <SpelledEnum E>
E enum_at(const Config& c, const std::string& key) {
    const std::string s = c.string(key);
    for (const auto& [value, name] : Spelling<E>::names)
        if (s == name) return value;
    throw Error("internal: config key '" + key + "': '" + s + "' has no enum value");
}

std::optional<double> optional_number(const Config& c, const std::string& key) {
    if (c.is_null(key)) return std::nullopt;
    return c.number(key);
}

json optional_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::string resume_spelling(const CheckpointPlan& k) {
    switch (k.resume) {
        case CheckpointPlan::Resume::Latest: return "auto";
        case CheckpointPlan::Resume::Path: return k.resume_path;
        case CheckpointPlan::Resume::Fresh: break;
    }
    return "";
}

}  // namespace

double OptimizerPlan::resolved_eps() const { return eps.value_or(name == OptimizerName::Adadelta ? 1e-6 : 1e-8); }

RunPlan RunPlan::from(const Config& c) {
    RunPlan p;
    p.model = c.string("model");
    p.device = enum_at<DeviceChoice>(c, "device");

    DataPlan& d = p.data;
    d.format = enum_at<DataFormat>(c, "data.format");
    d.dir = c.string("data.dir");
    d.mean = c.number("data.mean");
    d.stddev = c.number("data.std");
    d.prefetch = c.boolean("data.prefetch");
    d.workers = static_cast<int>(c.integer("data.workers"));
    d.synthetic_train_size = c.integer("data.synthetic_train_size");
    d.synthetic_test_size = c.integer("data.synthetic_test_size");
    d.synthetic_shape = c.integers("data.synthetic_shape");
    d.synthetic_classes = c.integer("data.synthetic_classes");

    TrainPlan& t = p.train;
    t.batch_size = c.integer("train.batch_size");
    t.epochs = c.integer("train.epochs");
    t.seed = static_cast<uint64_t>(c.integer("train.seed"));
    t.threads = static_cast<int>(c.integer("train.threads"));
    t.max_steps = c.integer("train.max_steps");
    t.eval_batch_size = c.integer("train.eval_batch_size");
    t.log_every_steps = c.integer("train.log_every_steps");
    t.profile_layers = c.boolean("train.profile_layers");

    OptimizerPlan& o = p.optimizer;
    o.name = enum_at<OptimizerName>(c, "optimizer.name");
    o.lr = c.number("optimizer.lr");
    o.lr_scaling = enum_at<LrScaling>(c, "optimizer.lr_scaling");
    o.momentum = c.number("optimizer.momentum");
    o.nesterov = c.boolean("optimizer.nesterov");
    o.weight_decay = c.number("optimizer.weight_decay");
    o.beta1 = c.number("optimizer.beta1");
    o.beta2 = c.number("optimizer.beta2");
    o.eps = optional_number(c, "optimizer.eps");
    o.rho = c.number("optimizer.rho");
    o.schedule = enum_at<Schedule>(c, "optimizer.schedule");
    o.step_epochs = c.number("optimizer.step_epochs");
    o.gamma = c.number("optimizer.gamma");
    o.min_lr_factor = c.number("optimizer.min_lr_factor");
    o.warmup_epochs = c.number("optimizer.warmup_epochs");
    o.warmup_start_lr = optional_number(c, "optimizer.warmup_start_lr");

    SyncPlan& s = p.sync;
    s.backend = enum_at<Backend>(c, "sync.backend");
    s.fusion_bytes = c.integer("sync.fusion_bytes");
    s.cycle_time_ms = c.number("sync.cycle_time_ms");
    s.min_bucket_bytes = c.integer("sync.min_bucket_bytes");
    s.overlap = c.boolean("sync.overlap");
    s.compression = enum_at<Compression>(c, "sync.compression");
    s.backward_passes_per_step = c.integer("sync.backward_passes_per_step");
    s.mode = enum_at<SyncMode>(c, "sync.mode");
    s.local_sgd_period = c.integer("sync.local_sgd_period");
    s.stall_warning_s = c.number("sync.stall_warning_s");
    s.stall_abort_s = c.number("sync.stall_abort_s");

    CheckpointPlan& k = p.checkpoint;
    k.every_epochs = c.integer("checkpoint.every_epochs");
    k.every_steps = c.integer("checkpoint.every_steps");
    k.keep = c.integer("checkpoint.keep");
    const std::string resume = c.string("checkpoint.resume");
    k.resume = resume.empty() ? CheckpointPlan::Resume::Fresh
               : resume == "auto" ? CheckpointPlan::Resume::Latest
                                  : CheckpointPlan::Resume::Path;
    if (k.resume == CheckpointPlan::Resume::Path) k.resume_path = resume;

    OutputPlan& out = p.output;
    out.dir = c.string("output.dir");
    out.timeline = c.string("output.timeline");
    out.progress = enum_at<ProgressMode>(c, "output.progress");
    return p;
}

json RunPlan::to_json() const {
    const DataPlan& d = data;
    const TrainPlan& t = train;
    const OptimizerPlan& o = optimizer;
    const SyncPlan& s = sync;
    return {
        {"model", model},
        {"device", to_string(device)},
        {"data", {{"format", to_string(d.format)}, {"dir", d.dir}, {"mean", d.mean}, {"std", d.stddev},
                  {"prefetch", d.prefetch}, {"workers", d.workers}, {"synthetic_train_size", d.synthetic_train_size},
                  {"synthetic_test_size", d.synthetic_test_size}, {"synthetic_shape", d.synthetic_shape},
                  {"synthetic_classes", d.synthetic_classes}}},
        {"train", {{"batch_size", t.batch_size}, {"epochs", t.epochs}, {"seed", t.seed}, {"threads", t.threads},
                   {"max_steps", t.max_steps}, {"eval_batch_size", t.eval_batch_size},
                   {"log_every_steps", t.log_every_steps}, {"profile_layers", t.profile_layers}}},
        {"optimizer", {{"name", to_string(o.name)}, {"lr", o.lr}, {"lr_scaling", to_string(o.lr_scaling)},
                       {"momentum", o.momentum}, {"nesterov", o.nesterov}, {"weight_decay", o.weight_decay},
                       {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", optional_json(o.eps)}, {"rho", o.rho},
                       {"schedule", to_string(o.schedule)}, {"step_epochs", o.step_epochs}, {"gamma", o.gamma},
                       {"min_lr_factor", o.min_lr_factor}, {"warmup_epochs", o.warmup_epochs},
                       {"warmup_start_lr", optional_json(o.warmup_start_lr)}}},
        {"sync", {{"backend", to_string(s.backend)}, {"fusion_bytes", s.fusion_bytes},
                  {"cycle_time_ms", s.cycle_time_ms}, {"min_bucket_bytes", s.min_bucket_bytes},
                  {"overlap", s.overlap}, {"compression", to_string(s.compression)},
                  {"backward_passes_per_step", s.backward_passes_per_step}, {"mode", to_string(s.mode)},
                  {"local_sgd_period", s.local_sgd_period}, {"stall_warning_s", s.stall_warning_s},
                  {"stall_abort_s", s.stall_abort_s}}},
        {"checkpoint", {{"every_epochs", checkpoint.every_epochs}, {"every_steps", checkpoint.every_steps},
                        {"keep", checkpoint.keep}, {"resume", resume_spelling(checkpoint)}}},
        {"output", {{"dir", output.dir}, {"timeline", output.timeline}, {"progress", to_string(output.progress)}}},
    };
}

uint64_t RunPlan::digest() const {
    uint64_t h = 14695981039346656037ULL;  // FNV-1a 64
    for (const unsigned char ch : to_json().dump()) h = (h ^ ch) * 1099511628211ULL;
    return h;
}

}  // namespace ringtrain::train

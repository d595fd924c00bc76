#include "ringtrain/train/run_plan.hpp"

#include <algorithm>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/optim/schedule.hpp"
#include "ringtrain/train/config.hpp"

namespace ringtrain::train {

using nlohmann::json;

namespace {

// Every field of the plan with its config key: the one list that parsing (from) and the canonical form
// (to_json) both walk. `Plan` is RunPlan or const RunPlan.
template <class Plan, class Visit>
void visit_fields(Plan& p, Visit&& visit) {
    visit("model", p.model);
    visit("device", p.device);

    visit("data.format", p.data.format);
    visit("data.dir", p.data.dir);
    visit("data.mean", p.data.mean);
    visit("data.std", p.data.stddev);
    visit("data.prefetch", p.data.prefetch);
    visit("data.workers", p.data.workers);
    visit("data.synthetic_train_size", p.data.synthetic_train_size);
    visit("data.synthetic_test_size", p.data.synthetic_test_size);
    visit("data.synthetic_shape", p.data.synthetic_shape);
    visit("data.synthetic_classes", p.data.synthetic_classes);
    visit("data.train_file", p.data.train_file);
    visit("data.test_file", p.data.test_file);
    visit("data.index_base", p.data.index_base);
    visit("data.num_features", p.data.num_features);
    visit("data.hash_bits", p.data.hash_bits);
    visit("data.criteo_integers", p.data.criteo_integers);
    visit("data.shuffle_buffer", p.data.shuffle_buffer);
    visit("data.cache", p.data.cache);
    visit("data.train_dir", p.data.train_dir);
    visit("data.test_dir", p.data.test_dir);
    visit("data.image_size", p.data.image_size);
    visit("data.channels", p.data.channels);
    visit("data.augment.random_crop_padding", p.data.augment_crop_padding);
    visit("data.augment.hflip", p.data.augment_hflip);
    visit("data.augment.random_resized_crop", p.data.augment_resized_crop);
    visit("data.skip_bad_files", p.data.skip_bad_files);

    visit("train.batch_size", p.train.batch_size);
    visit("train.epochs", p.train.epochs);
    visit("train.seed", p.train.seed);
    visit("train.threads", p.train.threads);
    visit("train.cpu_conv", p.train.cpu_conv);
    visit("train.cpu_precision", p.train.cpu_precision);
    visit("train.max_steps", p.train.max_steps);
    visit("train.eval_batch_size", p.train.eval_batch_size);
    visit("train.log_every_steps", p.train.log_every_steps);
    visit("train.profile_layers", p.train.profile_layers);
    visit("train.stop_signal", p.train.stop_signal);
    visit("train.stop_grace_s", p.train.stop_grace_s);

    visit("optimizer.name", p.optimizer.name);
    visit("optimizer.lr", p.optimizer.lr);
    visit("optimizer.lr_scaling", p.optimizer.lr_scaling);
    visit("optimizer.momentum", p.optimizer.momentum);
    visit("optimizer.nesterov", p.optimizer.nesterov);
    visit("optimizer.weight_decay", p.optimizer.weight_decay);
    visit("optimizer.beta1", p.optimizer.beta1);
    visit("optimizer.beta2", p.optimizer.beta2);
    visit("optimizer.eps", p.optimizer.eps);
    visit("optimizer.rho", p.optimizer.rho);
    visit("optimizer.schedule", p.optimizer.schedule);
    visit("optimizer.step_epochs", p.optimizer.step_epochs);
    visit("optimizer.gamma", p.optimizer.gamma);
    visit("optimizer.min_lr_factor", p.optimizer.min_lr_factor);
    visit("optimizer.warmup_epochs", p.optimizer.warmup_epochs);
    visit("optimizer.warmup_start_lr", p.optimizer.warmup_start_lr);
    visit("optimizer.l1", p.optimizer.l1);
    visit("optimizer.l2", p.optimizer.l2);
    visit("optimizer.beta", p.optimizer.beta);
    visit("optimizer.initial_accumulator", p.optimizer.initial_accumulator);

    visit("sync.backend", p.sync.backend);
    visit("sync.fusion_bytes", p.sync.fusion_bytes);
    visit("sync.cycle_time_ms", p.sync.cycle_time_ms);
    visit("sync.min_bucket_bytes", p.sync.min_bucket_bytes);
    visit("sync.overlap", p.sync.overlap);
    visit("sync.compression", p.sync.compression);
    visit("sync.backward_passes_per_step", p.sync.backward_passes_per_step);
    visit("sync.mode", p.sync.mode);
    visit("sync.local_sgd_period", p.sync.local_sgd_period);
    visit("sync.stall_warning_s", p.sync.stall_warning_s);
    visit("sync.stall_abort_s", p.sync.stall_abort_s);
    visit("sync.setup_timeout_s", p.sync.setup_timeout_s);
    visit("sync.sparse", p.sync.sparse);
    visit("sync.sparse_update", p.sync.sparse_update);
    visit("sync.batchnorm", p.sync.batchnorm);
    visit("sync.balance", p.sync.balance);

    visit("checkpoint.every_epochs", p.checkpoint.every_epochs);
    visit("checkpoint.every_steps", p.checkpoint.every_steps);
    visit("checkpoint.keep", p.checkpoint.keep);
    visit("checkpoint.resume", p.checkpoint.resume);

    visit("output.dir", p.output.dir);
    visit("output.timeline", p.output.timeline);
    visit("output.progress", p.output.progress);
    visit("output.tensorboard", p.output.tensorboard);
}

// ---- parsing: one overload per field type ----

void read(const Config& c, const std::string& key, std::string& v) { v = c.string(key); }
void read(const Config& c, const std::string& key, bool& v) { v = c.boolean(key); }
void read(const Config& c, const std::string& key, double& v) { v = c.number(key); }
void read(const Config& c, const std::string& key, int64_t& v) { v = c.integer(key); }
void read(const Config& c, const std::string& key, int& v) { v = static_cast<int>(c.integer(key)); }
void read(const Config& c, const std::string& key, uint64_t& v) { v = static_cast<uint64_t>(c.integer(key)); }
void read(const Config& c, const std::string& key, std::vector<int64_t>& v) { v = c.integers(key); }
void read(const Config& c, const std::string& key, std::vector<double>& v) { v = c.numbers(key); }
void read(const Config& c, const std::string& key, PerChannel& v) {
    v.scalar = !c.is_array(key);
    v.values = v.scalar ? std::vector<double>{c.number(key)} : c.numbers(key);
}

void read(const Config& c, const std::string& key, std::optional<double>& v) {
    v = c.is_null(key) ? std::nullopt : std::optional<double>(c.number(key));
}

// The schema has checked the spelling already; a miss here means the schema and Spelling<E> disagree.
template <SpelledEnum E>
void read(const Config& c, const std::string& key, E& v) {
    const std::string s = c.string(key);
    for (const auto& [value, name] : Spelling<E>::names)
        if (s == name) {
            v = value;
            return;
        }
    throw Error("internal: config key '" + key + "': '" + s + "' has no enum value");
}

void read(const Config& c, const std::string& key, ResumeFrom& v) {
    const std::string s = c.string(key);
    v.kind = s.empty() ? ResumeFrom::Fresh : s == "auto" ? ResumeFrom::Latest : ResumeFrom::Path;
    v.path = v.kind == ResumeFrom::Path ? s : "";
}

// ---- canonical form: the config spelling of each typed value ----

template <class T>
json canonical(const T& v) {
    return v;  // numbers, flags, strings, the integer array
}

json canonical(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json canonical(const PerChannel& v) { return v.scalar ? json(v.values.at(0)) : json(v.values); }

template <SpelledEnum E>
json canonical(const E& v) {
    return to_string(v);
}

json canonical(const ResumeFrom& v) {
    switch (v.kind) {
        case ResumeFrom::Latest: return "auto";
        case ResumeFrom::Path: return v.path;
        case ResumeFrom::Fresh: break;
    }
    return "";
}

}  // namespace

std::vector<float> PerChannel::for_channels(int channels) const {
    if (scalar) return std::vector<float>(static_cast<size_t>(channels), static_cast<float>(values.at(0)));
    return std::vector<float>(values.begin(), values.end());
}


// Each rule's own default, as PyTorch has them: Adadelta 1e-6, AdaGrad 1e-10, Adam 1e-8.
double OptimizerPlan::resolved_eps() const {
    if (eps) return *eps;
    switch (name) {
        case OptimizerName::Adadelta: return 1e-6;
        case OptimizerName::Adagrad: return 1e-10;
        case OptimizerName::Sgd:
        case OptimizerName::Adam:
        case OptimizerName::Ftrl: break;
    }
    return 1e-8;
}

optim::ScheduleOptions schedule_options(const RunPlan& plan) {
    const OptimizerPlan& o = plan.optimizer;
    optim::ScheduleOptions s;
    s.lr = static_cast<float>(o.lr);
    s.scaling = to_string(o.lr_scaling);
    s.decay = to_string(o.schedule);
    s.warmup_epochs = o.warmup_epochs;
    s.warmup_start_lr = o.warmup_start_lr.value_or(-1.0);
    s.step_epochs = o.step_epochs;
    s.gamma = o.gamma;
    s.min_lr_factor = o.min_lr_factor;
    s.total_epochs = static_cast<double>(plan.train.epochs);
    return s;
}

RunPlan RunPlan::from(const Config& c) {
    RunPlan p;
    visit_fields(p, [&c](const std::string& key, auto& field) { read(c, key, field); });
    return p;
}

json RunPlan::to_json() const {
    json doc = json::object();
    visit_fields(*this, [&doc](std::string key, const auto& field) {
        std::replace(key.begin(), key.end(), '.', '/');
        doc[json::json_pointer("/" + key)] = canonical(field);
    });
    return doc;
}

uint64_t RunPlan::digest() const {
    const std::string text = to_json().dump();
    return fnv1a(text.data(), text.size());
}

}  // namespace ringtrain::train

// RunPlan: a config parsed once into typed values (numbers, flags, enums), one struct per config section. Every
// choice in train/ and cli/ is made on these values, never by comparing config strings at the point of use.
// Its canonical form (to_json: the typed values, keys sorted, enums in their config spelling) and the digest of
// that form are what ranks compare to agree that they run the same plan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/ops/cpu_conv.hpp"

namespace ringtrain::optim {
struct ScheduleOptions;
}

namespace ringtrain::train {

class Config;

enum class DeviceChoice { Auto, Cpu, Cuda };
enum class DataFormat { Idx, Synthetic, Libsvm, Criteo, Cifar10, ImageFolder };
enum class CriteoIntegerTransform { Log2, Hash };
enum class OptimizerName { Sgd, Adam, Adadelta, Adagrad, Ftrl };
enum class LrScaling { Linear, Sqrt, None };
enum class Schedule { Constant, Step, Cosine };
enum class Backend { Ring, Mpi, Nccl };
enum class Compression { None, Fp16, Bf16 };
enum class SyncMode { Allreduce, LocalSgd };
enum class SparseSync { Auto, Allgather, Dense };
enum class SparseUpdate { Owner, Replicated };
enum class Balance { Off, Speed };
enum class ProgressMode { Auto, Bar, Lines, None };

// The config spelling of every value of an enum, in the order the schema lists them.
template <class E>
struct Spelling;
template <>
struct Spelling<DeviceChoice> {
    static constexpr std::pair<DeviceChoice, const char*> names[] = {
        {DeviceChoice::Auto, "auto"}, {DeviceChoice::Cpu, "cpu"}, {DeviceChoice::Cuda, "cuda"}};
};
template <>
struct Spelling<DataFormat> {
    static constexpr std::pair<DataFormat, const char*> names[] = {{DataFormat::Idx, "idx"},
                                                                   {DataFormat::Synthetic, "synthetic"},
                                                                   {DataFormat::Libsvm, "libsvm"},
                                                                   {DataFormat::Criteo, "criteo"},
                                                                   {DataFormat::Cifar10, "cifar10"},
                                                                   {DataFormat::ImageFolder, "image_folder"}};
};
template <>
struct Spelling<OptimizerName> {
    static constexpr std::pair<OptimizerName, const char*> names[] = {
        {OptimizerName::Sgd, "sgd"},         {OptimizerName::Adam, "adam"}, {OptimizerName::Adadelta, "adadelta"},
        {OptimizerName::Adagrad, "adagrad"}, {OptimizerName::Ftrl, "ftrl"}};
};
template <>
struct Spelling<LrScaling> {
    static constexpr std::pair<LrScaling, const char*> names[] = {
        {LrScaling::Linear, "linear"}, {LrScaling::Sqrt, "sqrt"}, {LrScaling::None, "none"}};
};
template <>
struct Spelling<Schedule> {
    static constexpr std::pair<Schedule, const char*> names[] = {
        {Schedule::Constant, "constant"}, {Schedule::Step, "step"}, {Schedule::Cosine, "cosine"}};
};
template <>
struct Spelling<Backend> {
    static constexpr std::pair<Backend, const char*> names[] = {
        {Backend::Ring, "ring"}, {Backend::Mpi, "mpi"}, {Backend::Nccl, "nccl"}};
};
template <>
struct Spelling<Compression> {
    static constexpr std::pair<Compression, const char*> names[] = {
        {Compression::None, "none"}, {Compression::Fp16, "fp16"}, {Compression::Bf16, "bf16"}};
};
template <>
struct Spelling<SyncMode> {
    static constexpr std::pair<SyncMode, const char*> names[] = {{SyncMode::Allreduce, "allreduce"},
                                                                 {SyncMode::LocalSgd, "local_sgd"}};
};
template <>
struct Spelling<CriteoIntegerTransform> {
    static constexpr std::pair<CriteoIntegerTransform, const char*> names[] = {{CriteoIntegerTransform::Log2, "log2"},
                                                                               {CriteoIntegerTransform::Hash, "hash"}};
};
template <>
struct Spelling<SparseSync> {
    static constexpr std::pair<SparseSync, const char*> names[] = {
        {SparseSync::Auto, "auto"}, {SparseSync::Allgather, "allgather"}, {SparseSync::Dense, "dense"}};
};
template <>
struct Spelling<SparseUpdate> {
    static constexpr std::pair<SparseUpdate, const char*> names[] = {{SparseUpdate::Owner, "owner"},
                                                                     {SparseUpdate::Replicated, "replicated"}};
};
template <>
struct Spelling<Balance> {
    static constexpr std::pair<Balance, const char*> names[] = {{Balance::Off, "off"}, {Balance::Speed, "speed"}};
};
template <>
struct Spelling<ProgressMode> {
    static constexpr std::pair<ProgressMode, const char*> names[] = {
        {ProgressMode::Auto, "auto"}, {ProgressMode::Bar, "bar"}, {ProgressMode::Lines, "lines"},
        {ProgressMode::None, "none"}};
};

template <>
struct Spelling<ops::CpuConv> {
    static constexpr std::pair<ops::CpuConv, const char*> names[] = {
        {ops::CpuConv::Auto, "auto"}, {ops::CpuConv::OneDnn, "onednn"}, {ops::CpuConv::Im2col, "im2col"}};
};

template <>
struct Spelling<ops::CpuPrecision> {
    static constexpr std::pair<ops::CpuPrecision, const char*> names[] = {{ops::CpuPrecision::Fp32, "fp32"},
                                                                          {ops::CpuPrecision::Bf16, "bf16"}};
};

template <class E>
concept SpelledEnum = requires { Spelling<E>::names; };

// The config spelling of `value` ("local_sgd", "fp16", ...).
template <SpelledEnum E>
const char* to_string(E value) {
    for (const auto& [v, name] : Spelling<E>::names)
        if (v == value) return name;
    return "?";
}

// Every spelling of E, for the schema's list of choices.
template <SpelledEnum E>
std::vector<std::string> spellings() {
    std::vector<std::string> v;
    for (const auto& entry : Spelling<E>::names) v.emplace_back(entry.second);
    return v;
}

// data.mean / data.std: one number for every channel, or one value per channel (image_folder).
struct PerChannel {
    std::vector<double> values;
    bool scalar = true;  // written as a number (values holds it once)
    // The value for each of `channels` channels (a number repeated; an array as it is).
    std::vector<float> for_channels(int channels) const;
};

struct DataPlan {
    DataFormat format = DataFormat::Idx;
    std::string dir;
    PerChannel mean{{0.0}}, stddev{{1.0}};  // data.mean, data.std
    bool prefetch = true;
    int workers = 1;
    int64_t synthetic_train_size = 0, synthetic_test_size = 0;
    std::vector<int64_t> synthetic_shape;
    int64_t synthetic_classes = 0;
    // The sparse (click-log) formats, libsvm and criteo: text files read streaming.
    std::string train_file, test_file;
    int index_base = 1;        // libsvm: 1 (as libsvm) or 0
    int64_t num_features = 0;  // libsvm: 0 = from the training file
    int hash_bits = 20;        // criteo: (column, value) pairs hash into 2^hash_bits features
    CriteoIntegerTransform criteo_integers = CriteoIntegerTransform::Log2;
    int64_t shuffle_buffer = 0;  // rows shuffled in memory (0 = file order)
    bool cache = false;          // keep each rank's parsed share in memory after the first pass (image_folder: the
                                 // decoded, resized images)
    // image_folder: one sub-folder per class in each split.
    std::string train_dir, test_dir;
    std::vector<int64_t> image_size{0, 0};  // [H, W]
    int channels = 3;
    int augment_crop_padding = 0;                       // data.augment.random_crop_padding
    bool augment_hflip = false;                         // data.augment.hflip
    std::vector<double> augment_resized_crop{0.0, 0.0};  // data.augment.random_resized_crop: [min, max], 0 = off
    bool skip_bad_files = false;

    // libsvm or criteo: the run takes the sparse path (SparseTrainer), whose model is one sparse_linear layer.
    bool is_sparse() const { return format == DataFormat::Libsvm || format == DataFormat::Criteo; }
};

struct TrainPlan {
    int64_t batch_size = 0;  // per rank
    int64_t epochs = 0;
    uint64_t seed = 0;
    int threads = 1;
    ops::CpuConv cpu_conv = ops::CpuConv::Auto;  // which CPU convolutions run (ops/cpu_conv.hpp)
    ops::CpuPrecision cpu_precision = ops::CpuPrecision::Fp32;  // bf16 convolutions and linear layers (ops/cpu_conv.hpp)
    int64_t max_steps = 0;  // 0 = no cap
    int64_t eval_batch_size = 0;
    int64_t log_every_steps = 0;
    bool profile_layers = false;
    std::string stop_signal = "SIGUSR1";  // besides SIGTERM/SIGINT: a spelling of stop_signal_spellings(), or "none"
    double stop_grace_s = 60;             // after a stop signal, how long the ranks may take to agree (0 = no limit)
};

struct OptimizerPlan {
    OptimizerName name = OptimizerName::Sgd;
    double lr = 0;
    LrScaling lr_scaling = LrScaling::Linear;
    double momentum = 0;
    bool nesterov = false;
    double weight_decay = 0, beta1 = 0, beta2 = 0;
    std::optional<double> eps;  // unset: the optimizer's own default (eps())
    double rho = 0;
    Schedule schedule = Schedule::Constant;
    double step_epochs = 0, gamma = 0, min_lr_factor = 0, warmup_epochs = 0;
    std::optional<double> warmup_start_lr;  // unset: the unscaled lr
    // The sparse optimizers: AdaGrad (initial_accumulator) and FTRL-Proximal (lr is FTRL's alpha; beta, l1, l2).
    double l1 = 0, l2 = 0, beta = 1, initial_accumulator = 0;

    // eps as given, else the rule's own default (PyTorch's): 1e-6 Adadelta, 1e-10 AdaGrad, 1e-8 the others.
    double resolved_eps() const;
};

struct SyncPlan {
    Backend backend = Backend::Ring;
    int64_t fusion_bytes = 0;
    double cycle_time_ms = 0;
    int64_t min_bucket_bytes = 0;
    bool overlap = true;
    Compression compression = Compression::None;
    int64_t backward_passes_per_step = 1;
    SyncMode mode = SyncMode::Allreduce;
    int64_t local_sgd_period = 1;
    double stall_warning_s = 0, stall_abort_s = 0;
    double setup_timeout_s = 0;  // 0 = no limit
    SparseSync sparse = SparseSync::Auto;  // how the sparse path combines the ranks' gradient rows
    SparseUpdate sparse_update = SparseUpdate::Owner;  // which rank updates which rows (sync.mode allreduce)
    bool batchnorm = false;  // synchronised BatchNorm (statistics over every rank's batch)
    Balance balance = Balance::Off;  // split each step's global batch by the ranks' speed (sync/batch_balancer.hpp)
};

// checkpoint.resume: "" (a fresh start), "auto" (the latest checkpoint in output.dir, if any) or a path.
struct ResumeFrom {
    enum Kind { Fresh, Latest, Path } kind = Fresh;
    std::string path;  // Path only
};

struct CheckpointPlan {
    int64_t every_epochs = 0, every_steps = 0;  // 0 = never
    int64_t keep = 1;
    ResumeFrom resume;

    bool enabled() const { return every_epochs > 0 || every_steps > 0; }
};

struct OutputPlan {
    std::string dir;
    std::string timeline;  // "" = none
    ProgressMode progress = ProgressMode::Auto;
    bool tensorboard = false;  // rank 0 writes TensorBoard event files into dir/tensorboard

    std::string tensorboard_dir() const { return dir + "/tensorboard"; }

    std::string checkpoint_dir() const { return dir + "/checkpoints"; }
};

struct RunPlan {
    std::string model;  // as written in the config (Config::model_path() resolves it)
    DeviceChoice device = DeviceChoice::Auto;
    DataPlan data;
    TrainPlan train;
    OptimizerPlan optimizer;
    SyncPlan sync;
    CheckpointPlan checkpoint;
    OutputPlan output;

    // Reads every key of a validated Config (the schema has already checked types, ranges and choices).
    static RunPlan from(const Config& config);

    // Canonical form: every typed value under its config key, enums spelled as in the config, unset optionals
    // as null. Equal plans give equal text (nlohmann::json keeps keys sorted), on every rank and build.
    nlohmann::json to_json() const;
    // 64-bit FNV-1a of to_json().dump(): what ranks exchange to check they run the same plan.
    uint64_t digest() const;
};

// The learning-rate schedule the plan's optimizer keys describe (both paths build theirs from this).
optim::ScheduleOptions schedule_options(const RunPlan& plan);

}  // namespace ringtrain::train

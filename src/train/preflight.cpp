#include "preflight.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/image_folder.hpp"
#include "ringtrain/telemetry/timeline.hpp"

namespace ringtrain::train::detail {

namespace fs = std::filesystem;

namespace {

std::string bytes_text(double b) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (b >= 1024.0 && u < 6) {
        b /= 1024.0;
        ++u;
    }
    char buf[48];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
    return buf;
}

// Optimizer state per parameter value, as optim allocates it.
double optimizer_slots(const OptimizerPlan& o) {
    switch (o.name) {
        case OptimizerName::Sgd: return o.momentum > 0.0 ? 1.0 : 0.0;
        case OptimizerName::Adam:
        case OptimizerName::Adadelta: return 2.0;
        case OptimizerName::Adagrad:  // sparse path only (the config refuses them on this one)
        case OptimizerName::Ftrl: return 2.0;
    }
    return 0.0;
}

double physical_memory_bytes() {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

// Why nothing can be created in `folder` (a probe folder made and removed), or "" when something can.
std::string cannot_write_in(const fs::path& folder) {
    std::string probe = (folder / ".ringtrain-write-test-XXXXXX").string();
    if (::mkdtemp(probe.data()) == nullptr) return std::strerror(errno);
    std::error_code ec;
    fs::remove(probe, ec);
    return "";
}

}  // namespace

void check_data_paths(const DataPlan& data) {
    std::error_code ec;
    const auto from_here = [&](const std::string& path) {
        return fs::path(path).is_absolute() ? std::string()
                                            : " (relative to the working directory " + fs::current_path(ec).string() + ")";
    };
    if (data.format == DataFormat::Idx || data.format == DataFormat::Cifar10) {
        const std::string what = data.format == DataFormat::Idx
                                     ? "name the folder that holds the data set's IDX files"
                                     : "put the CIFAR-10 binary version there (data_batch_1..5.bin, test_batch.bin; "
                                       "download it from https://www.cs.toronto.edu/~kriz/cifar.html)";
        if (!fs::is_directory(data.dir, ec))
            throw InputError("data.dir: " + data.dir + (fs::exists(data.dir, ec) ? " is not a folder" : " not found") +
                             from_here(data.dir) + "; " + what);
        return;
    }
    if (!data.is_sparse()) return;
    for (const auto& [key, path] : {std::pair<const char*, const std::string&>{"data.train_file", data.train_file},
                                    std::pair<const char*, const std::string&>{"data.test_file", data.test_file}}) {
        if (fs::is_directory(path, ec))
            throw InputError(std::string(key) + ": " + path + " is a folder; name a libsvm or criteo file");
        std::ifstream probe(path);
        if (!probe) {
            const std::string why = std::strerror(errno);  // before anything else can set errno
            throw InputError(std::string(key) + ": " + path + ": cannot open (" + why + ")" + from_here(path) +
                             "; name a readable libsvm or criteo file (plain or .gz)");
        }
    }
}

void check_output_dir(const std::string& dir) {
    const fs::path target = fs::absolute(fs::path(dir)).lexically_normal();
    std::error_code ec;
    if (fs::exists(target, ec) && !fs::is_directory(target, ec))
        throw InputError("output.dir: '" + dir + "' exists and is not a folder; name a folder for the run's outputs");
    // The nearest folder that exists: the run creates the rest below it.
    fs::path existing = target;
    while (!fs::exists(existing, ec) && existing.has_relative_path()) existing = existing.parent_path();
    if (!fs::is_directory(existing, ec))
        throw InputError("output.dir: '" + dir + "' cannot be created: '" + existing.string() +
                         "' is not a folder; name a writable folder");
    if (const std::string why = cannot_write_in(existing); !why.empty())
        throw InputError("output.dir: cannot write in '" + existing.string() + "' (" + why + "), so '" + dir +
                         "' cannot hold the run's outputs; name a writable folder");
    // Its checkpoints/ folder, where it is there already (a read-only mount, another owner's): found at the first
    // checkpoint, it cost the training up to there (and a stop signal always writes one).
    const fs::path checkpoints = target / "checkpoints";
    if (!fs::exists(checkpoints, ec)) return;
    if (!fs::is_directory(checkpoints, ec))
        throw InputError("output.dir: '" + checkpoints.string() + "' exists and is not a folder; the run's checkpoints "
                         "go there: move it away or name another output.dir");
    if (const std::string why = cannot_write_in(checkpoints); !why.empty())
        throw InputError("output.dir: cannot write in '" + checkpoints.string() + "' (" + why + "), where the run's "
                         "checkpoints go; make it writable or name another output.dir");
}

void check_splits(const Datasets& data, const nn::ModelFootprint& model, const std::string& model_path,
                  const std::string& data_key) {
    const data::Dataset& train = *data.train;
    const data::Dataset& test = *data.test;
    // The model reads samples by their number of values, so a test set of 14x56 images would be evaluated as
    // scrambled 28x28 ones without this.
    if (test.sample_shape() != train.sample_shape())
        throw InputError(data_key + ": the test samples have shape " + shape_string(test.sample_shape()) +
                         " but the training samples " + shape_string(train.sample_shape()) + " (" +
                         test.description() + "); both splits must come from one data set");
    const bool bce = model.loss == "sigmoid_bce";
    const int64_t outputs = model.output.size() == 1 ? model.output[0] : -1;
    const int64_t want = bce ? 1 : train.num_classes();
    if (outputs != want)
        throw InputError(model_path + ": the last layer gives " + shape_string(model.output) + " per sample but " +
                         (bce ? std::string("sigmoid_bce takes 1 output")
                              : "the data set has " + std::to_string(train.num_classes()) + " classes") +
                         "; make the last layer's size " + std::to_string(want));
    // Labels are checked against what the loss can take: 0/1 for sigmoid_bce, one class per output otherwise.
    for (const data::Dataset* split : {&train, &test}) {
        const std::string labels = split->description() + " has labels up to " + std::to_string(split->num_classes() - 1);
        if (bce && split->num_classes() > 2)
            throw InputError(model_path + ": .loss: sigmoid_bce takes labels 0 and 1, but " + labels +
                             "; use softmax_cross_entropy with one output per class, or a two-class data set");
        if (!bce && split->num_classes() > outputs)
            throw InputError(data_key + ": " + labels + " but the model has " + std::to_string(outputs) +
                             " outputs (labels 0 to " + std::to_string(outputs - 1) +
                             "); both splits must share one label set");
    }
}

std::vector<MemoryPart> estimate_memory(const RunPlan& plan, const Datasets& data, const nn::ModelFootprint& model) {
    constexpr double kFloat = 4.0;
    double params = 0, acts = shape_numel(model.input);
    const nn::ModelFootprint::LayerCost* widest = nullptr;  // most parameters
    const nn::ModelFootprint::LayerCost* tallest = nullptr;  // largest output
    for (const auto& l : model.layers) {
        params += l.parameters;
        acts += l.outputs;
        if (!widest || l.parameters > widest->parameters) widest = &l;
        if (!tallest || l.outputs > tallest->outputs) tallest = &l;
    }
    std::vector<MemoryPart> parts;
    // Value and gradient, plus the optimizer's state; the fusion arena and copies are not counted (a lower bound).
    parts.push_back({.what = "parameters, gradients and optimizer state", .key = widest->where,
                     .hint = "make that layer smaller",
                     .bytes = params * kFloat * (2.0 + optimizer_slots(plan.optimizer))});
    // The model keeps every layer's output and its gradient, sized by the largest batch it has seen.
    const bool eval_larger = plan.train.eval_batch_size > plan.train.batch_size;
    const double batch = double(std::max(plan.train.batch_size, plan.train.eval_batch_size));
    parts.push_back({.what = "activations and their gradients for batches of " + std::to_string(int64_t(batch)),
                     .key = eval_larger ? "train.eval_batch_size" : "train.batch_size",
                     .hint = "lower it",
                     .bytes = acts * batch * kFloat * 2.0,
                     .at_least = acts * kFloat * 2.0,  // a batch of one
                     .otherwise_key = tallest->where,
                     .otherwise_hint = "make that layer's output smaller"});
    // The loader's shuffled order holds one index per training sample; IDX and CIFAR-10 splits sit in memory as bytes.
    double data_bytes = 8.0 * double(data.train->size());
    if (plan.data.format == DataFormat::Idx || plan.data.format == DataFormat::Cifar10)
        data_bytes += double(data.train->size()) * double(shape_numel(data.train->sample_shape())) +
                      double(data.test->size()) * double(shape_numel(data.test->sample_shape()));
    // image_folder with data.cache: each rank may come to hold every image of both splits at the stored size.
    double cache_bytes = 0;
    for (const data::Dataset* split : {data.train.get(), data.test.get()})
        if (const auto* folder = dynamic_cast<const data::ImageFolderDataset*>(split))
            cache_bytes += double(folder->cache_bytes_when_full());
    if (cache_bytes > 0)
        parts.push_back({.what = "decoded-image cache", .key = "data.cache", .hint = "set it to false",
                         .bytes = cache_bytes});
    const bool synthetic = plan.data.format == DataFormat::Synthetic;
    parts.push_back({.what = "data set", .key = synthetic ? "data.synthetic_train_size" : "data.dir",
                     .hint = synthetic ? "lower it" : "use a smaller data set", .bytes = data_bytes});
    return parts;
}

void check_memory(const std::vector<MemoryPart>& parts, double available_bytes, const std::string& available_what) {
    double total = 0;
    const MemoryPart* largest = nullptr;
    std::string detail;
    for (const auto& p : parts) {
        total += p.bytes;
        if (!largest || p.bytes > largest->bytes) largest = &p;
        detail += (detail.empty() ? "" : "; ") + p.what + ": " + bytes_text(p.bytes);
    }
    if (available_bytes <= 0 || total <= available_bytes || !largest) return;
    // Name what the user should change: the largest part's key, unless even its smallest value would not fit.
    const bool key_cannot_fix = !largest->otherwise_key.empty() && total - largest->bytes + largest->at_least > available_bytes;
    throw InputError((key_cannot_fix ? largest->otherwise_key : largest->key) + ": the run needs at least " +
                     bytes_text(total) + " per rank (" + detail + ") but " + available_what + " has " +
                     bytes_text(available_bytes) + "; " + (key_cannot_fix ? largest->otherwise_hint : largest->hint));
}

namespace {

// output.timeline is written at the end of the run (each rank its own file, next to rank 0's): a folder that cannot
// hold it is found now, not after the training it was meant to trace.
// The file is written beside and renamed over the name, which would replace whatever is there: only a missing name or
// a writable regular file (a previous trace) is taken; a folder, link, device or pipe, or a read-only file, is refused.
// How every trace Timeline::write makes begins.
constexpr const char* kTraceStart = "{\"displayTimeUnit\":";

void check_timeline_path(const std::string& path, int rank, const std::string& output_dir) {
    if (path.empty()) return;
    const fs::path folder = fs::absolute(fs::path(path)).parent_path();
    std::error_code ec;
    // The run's own output.dir (Horovod users put HOROVOD_TIMELINE beside the run): rank 0 checks and creates it
    // before training, so it need not exist yet.
    if (!fs::exists(folder, ec) && folder.lexically_normal() == fs::absolute(output_dir).lexically_normal()) return;
    if (!fs::is_directory(folder, ec))
        throw InputError("output.timeline: the folder '" + folder.string() + "' of '" + path + "' does not exist; "
                         "create it or name a file in an existing folder");
    if (const std::string why = cannot_write_in(folder); !why.empty())
        throw InputError("output.timeline: cannot write in '" + folder.string() + "' (" + why +
                         "); name a file in a writable folder");
    const std::string mine = telemetry::Timeline::rank_path(path, rank);
    const fs::file_status st = fs::symlink_status(mine, ec);
    if (ec || !fs::exists(st)) return;
    if (!fs::is_regular_file(st))
        throw InputError("output.timeline: '" + mine + "' exists and is not a regular file (a folder, link, device or "
                         "pipe), which writing the trace would replace; name a new file");
    if (::access(mine.c_str(), W_OK) != 0)
        throw InputError("output.timeline: '" + mine + "' exists and is not writable (" + std::strerror(errno) +
                         "); name a new file, or make it writable to replace it");
    // Replaced only if it is a previous trace (or empty): a mistyped --timeline naming the run's config, its
    // summary.json or any other file would otherwise lose it.
    std::string head(std::strlen(kTraceStart), '\0');
    std::ifstream in(mine, std::ios::binary);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    if (in.gcount() > 0 && head != kTraceStart)
        throw InputError("output.timeline: '" + mine + "' exists and is not a ringtrain timeline, which writing the "
                         "trace would replace; name a new file, or remove it first");
}

// A training run needs one global batch of samples per step (the loader and TrainingRun say the same later, after
// the ranks' set-up agreement, where a refusal ends the job through MPI_Abort): checked here, inside it.
void check_global_batch(const RunPlan& plan, int64_t train_samples, int world) {
    const int64_t global = plan.train.batch_size * world * plan.sync.backward_passes_per_step;
    if (train_samples >= global) return;
    throw InputError("train.batch_size: " + std::to_string(plan.train.batch_size) + " per rank x " +
                     std::to_string(world) + " ranks" +
                     (plan.sync.backward_passes_per_step > 1
                          ? " x sync.backward_passes_per_step " + std::to_string(plan.sync.backward_passes_per_step)
                          : std::string()) +
                     " = " + std::to_string(global) + " samples a step, more than the " +
                     std::to_string(train_samples) + " training samples; use a smaller batch or fewer ranks");
}

}  // namespace

void preflight(const TrainerParts& parts) {
    // eval writes nothing there: a config whose output folder is read-only on this node still evaluates.
    if (parts.use == TrainerUse::Train) {
        if (parts.is_root()) check_output_dir(parts.plan.output.dir);
        check_timeline_path(parts.plan.output.timeline, parts.rank, parts.plan.output.dir);
        check_global_batch(parts.plan, parts.data.train->size(), parts.world);
    }
    const std::string model_path = parts.config.model_path();
    const nn::ModelFootprint model = nn::Model::footprint(model_path, parts.data.train->sample_shape());
    check_splits(parts.data, model, model_path,
                 parts.plan.data.format == DataFormat::Synthetic     ? "data.synthetic_classes"
                 : parts.plan.data.format == DataFormat::ImageFolder ? "data.train_dir"
                                                                     : "data.dir");
    check_memory_on_host(estimate_memory(parts.plan, parts.data, model), parts.comm.local_size());
}

void check_memory_on_host(const std::vector<MemoryPart>& parts, int local_ranks) {
    local_ranks = std::max(1, local_ranks);
    const std::string share = local_ranks == 1 ? std::string("this host")
                                               : "each of this host's " + std::to_string(local_ranks) + " ranks";
    check_memory(parts, physical_memory_bytes() / local_ranks, share);
}

}  // namespace ringtrain::train::detail

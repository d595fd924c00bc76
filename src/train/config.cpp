#include "ringtrain/train/config.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/json_file.hpp"
#include "ringtrain/train/stop_request.hpp"

namespace ringtrain::train {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

enum class Kind { Int, Number, Bool, String, IntArray };

// A schema row, written with designated initialisers; every member has a default so a row names only what it sets.
struct KeySpec {
    Kind kind = Kind::String;
    json fallback = nullptr;  // null with nullable = false means required
    std::optional<double> min = std::nullopt, max = std::nullopt;
    std::vector<std::string> choices = {};  // allowed spellings (from the RunPlan enum the key parses into)
    bool nullable = false;
    bool nonempty = false;  // strings: "" is refused (e.g. an output folder of "" would mean the current one, or /)
    const char* doc = "";
};

const std::map<std::string, KeySpec>& schema() {
    static const std::map<std::string, KeySpec> s = {
        {"model", {.kind = Kind::String, .doc = "architecture file (models/*.json)"}},
        {"device", {.kind = Kind::String, .fallback = "auto", .choices = spellings<DeviceChoice>(),
          .doc = "where each rank computes"}},
        {"data.format", {.kind = Kind::String, .fallback = "idx", .choices = spellings<DataFormat>(),
          .doc = "data set reader"}},
        {"data.dir", {.kind = Kind::String, .fallback = "/usr/share/datasets/fashion-mnist",
          .doc = "idx: folder with the four IDX files (train-images-idx3-ubyte[.gz] ...); cifar10: folder with "
                 "data_batch_1..5.bin and test_batch.bin (the binary version)"}},
        {"data.mean", {.kind = Kind::Number, .fallback = 0.0, .doc = "subtracted after scaling pixels to [0,1]"}},
        {"data.std", {.kind = Kind::Number, .fallback = 1.0, .min = 1e-12,
          .doc = "divides after subtracting the mean"}},
        {"data.prefetch", {.kind = Kind::Bool, .fallback = true,
          .doc = "fill the next batch on a background thread where it can pay (on the CPU: more usable CPUs than "
                  "train.threads), until 32 batches show that it hides under a quarter of the filling"}},
        {"data.workers", {.kind = Kind::Int, .fallback = 1, .min = 1, .max = 64,
          .doc = "threads that fill each batch together (DataLoader's num_workers; batches of 1 M floats or more)"}},
        {"data.synthetic_train_size", {.kind = Kind::Int, .fallback = 8192, .min = 1,
          .doc = "synthetic: training samples"}},
        {"data.synthetic_test_size", {.kind = Kind::Int, .fallback = 2048, .min = 1, .doc = "synthetic: test samples"}},
        {"data.synthetic_shape", {.kind = Kind::IntArray, .fallback = json::array({1, 28, 28}), .min = 1,
          .doc = "synthetic: sample shape"}},
        {"data.synthetic_classes", {.kind = Kind::Int, .fallback = 10, .min = 2,
          .doc = "synthetic: number of classes"}},
        {"data.train_file", {.kind = Kind::String, .fallback = "",
          .doc = "libsvm/criteo: training file (plain or .gz), read streaming, each rank its share of the lines"}},
        {"data.test_file", {.kind = Kind::String, .fallback = "",
          .doc = "libsvm/criteo: test file (plain or .gz)"}},
        {"data.index_base", {.kind = Kind::Int, .fallback = 1, .min = 0, .max = 1,
          .doc = "libsvm: the first feature index (1 as libsvm, or 0)"}},
        {"data.num_features", {.kind = Kind::Int, .fallback = 0, .min = 0, .max = int64_t{1} << 32,
          .doc = "libsvm: feature count (0 = the largest index in the training file, rounded up)"}},
        {"data.hash_bits", {.kind = Kind::Int, .fallback = 20, .min = 1, .max = 30,
          .doc = "criteo: (column, value) pairs hash into 2^hash_bits features"}},
        {"data.criteo_integers", {.kind = Kind::String, .fallback = "log2",
          .choices = spellings<CriteoIntegerTransform>(),
          .doc = "criteo: integer columns bucketed as floor(log(x)^2) (log2) or hashed as they are (hash)"}},
        {"data.shuffle_buffer", {.kind = Kind::Int, .fallback = 0, .min = 0, .max = int64_t{1} << 26,
          .doc = "libsvm/criteo: rows shuffled in memory (0 = file order)"}},
        {"data.cache", {.kind = Kind::Bool, .fallback = false,
          .doc = "libsvm/criteo: keep each rank's parsed share in memory after the first epoch (small files)"}},
        {"train.batch_size", {.kind = Kind::Int, .fallback = 64, .min = 1, .max = 1 << 20,
          .doc = "samples per rank per step (global = N x this)"}},
        {"train.epochs", {.kind = Kind::Int, .fallback = 1, .min = 1, .max = 100000,
          .doc = "passes over the training set"}},
        {"train.seed", {.kind = Kind::Int, .fallback = 42, .min = 0,
          .doc = "seed for initialisation, shuffling and dropout"}},
        {"train.threads", {.kind = Kind::Int, .fallback = 1, .min = 1, .max = 1024,
          .doc = "intra-op CPU threads per rank"}},
        {"train.cpu_conv", {.kind = Kind::String, .fallback = "auto", .choices = spellings<ops::CpuConv>(),
          .doc = "CPU convolutions: onednn, im2col, or auto (what measured faster on this CPU; `ringtrain info`)"}},
        {"train.max_steps", {.kind = Kind::Int, .fallback = 0, .min = 0,
          .doc = "stop after this many steps in all (0 = no cap)"}},
        {"train.eval_batch_size", {.kind = Kind::Int, .fallback = 1000, .min = 1, .max = 1 << 20,
          .doc = "batch size for evaluation"}},
        {"train.log_every_steps", {.kind = Kind::Int, .fallback = 50, .min = 1,
          .doc = "steps between metrics lines and progress lines"}},
        {"train.profile_layers", {.kind = Kind::Bool, .fallback = false,
          .doc = "time each layer (adds per-layer times to the summary)"}},
        {"train.stop_signal", {.kind = Kind::String, .fallback = "SIGUSR1", .choices = stop_signal_spellings(),
          .doc = "besides SIGTERM and SIGINT, this signal stops the run at the next step with a checkpoint (exit 3; "
                  "pair with sbatch --signal=B:USR1@120); none = only those two"}},
        {"train.stop_grace_s", {.kind = Kind::Number, .fallback = 60.0, .min = 0.0,
          .doc = "after a stop signal, end at once (exit 4, no checkpoint) if the ranks have not agreed to stop "
                  "within this many seconds (0 = wait for ever)"}},
        {"optimizer.name", {.kind = Kind::String, .fallback = "sgd", .choices = spellings<OptimizerName>(),
          .doc = "update rule"}},
        {"optimizer.lr", {.kind = Kind::Number, .fallback = 0.01, .min = 1e-12, .max = 1e6,
          .doc = "single-rank learning rate (scaled by lr_scaling)"}},
        {"optimizer.lr_scaling", {.kind = Kind::String, .fallback = "linear", .choices = spellings<LrScaling>(),
          .doc = "world-size rule: lr x N, lr x sqrt(N) or lr"}},
        {"optimizer.momentum", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0, .max = 0.999999,
          .doc = "SGD momentum"}},
        {"optimizer.nesterov", {.kind = Kind::Bool, .fallback = false, .doc = "SGD Nesterov momentum"}},
        {"optimizer.weight_decay", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0, .max = 1.0,
          .doc = "L2 penalty added to the gradient"}},
        {"optimizer.beta1", {.kind = Kind::Number, .fallback = 0.9, .min = 0.0, .max = 0.999999, .doc = "Adam"}},
        {"optimizer.beta2", {.kind = Kind::Number, .fallback = 0.999, .min = 0.0, .max = 0.999999999, .doc = "Adam"}},
        {"optimizer.eps", {.kind = Kind::Number, .min = 1e-20, .max = 1.0, .nullable = true,
          .doc = "Adam (default 1e-8) / Adadelta (default 1e-6) / AdaGrad (default 1e-10)"}},
        {"optimizer.rho", {.kind = Kind::Number, .fallback = 0.9, .min = 0.0, .max = 0.999999,
          .doc = "Adadelta decay"}},
        {"optimizer.l1", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0, .max = 1e6,
          .doc = "ftrl: L1 strength (weights with |z| <= l1 are exactly 0)"}},
        {"optimizer.l2", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0, .max = 1e6, .doc = "ftrl: L2 strength"}},
        {"optimizer.beta", {.kind = Kind::Number, .fallback = 1.0, .min = 0.0, .max = 1e6,
          .doc = "ftrl: beta of the per-coordinate rate alpha / (beta + sqrt(n)); alpha is optimizer.lr"}},
        {"optimizer.initial_accumulator", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0, .max = 1e6,
          .doc = "adagrad: starting value of each squared-gradient sum (0 as PyTorch; TensorFlow uses 0.1)"}},
        {"optimizer.schedule", {.kind = Kind::String, .fallback = "constant", .choices = spellings<Schedule>(),
          .doc = "decay after warmup"}},
        {"optimizer.step_epochs", {.kind = Kind::Number, .fallback = 30.0, .min = 1e-9,
          .doc = "step schedule: epochs between decays"}},
        {"optimizer.gamma", {.kind = Kind::Number, .fallback = 0.1, .min = 0.0, .max = 1.0,
          .doc = "step schedule: decay factor"}},
        {"optimizer.min_lr_factor", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0, .max = 1.0,
          .doc = "cosine: final lr as a fraction of the peak"}},
        {"optimizer.warmup_epochs", {.kind = Kind::Number, .fallback = 0.0, .min = 0.0,
          .doc = "linear warmup length (Goyal et al.)"}},
        {"optimizer.warmup_start_lr", {.kind = Kind::Number, .min = 0.0, .nullable = true,
          .doc = "warmup start (default: the unscaled lr)"}},
        {"sync.backend", {.kind = Kind::String, .fallback = "ring", .choices = spellings<Backend>(),
          .doc = "allreduce implementation"}},
        {"sync.fusion_bytes", {.kind = Kind::Int, .fallback = int64_t{64} << 20, .min = 0,
          .doc = "gradients are packed into buffers up to this size, one allreduce each (0 = one per tensor)"}},
        {"sync.cycle_time_ms", {.kind = Kind::Number, .fallback = 1.0, .min = 0.0, .max = 10000.0,
          .doc = "with overlap: gradients ready more than this apart (timed in the first step) "
                  "go in separate buckets (0 = by size only)"}},
        {"sync.min_bucket_bytes", {.kind = Kind::Int, .fallback = int64_t{1} << 20, .min = 0,
          .doc = "with cycle_time_ms: a time gap closes a bucket only once it holds this many bytes"}},
        {"sync.overlap", {.kind = Kind::Bool, .fallback = true,
          .doc = "allreduce finished buckets on a communication thread while backward goes on"}},
        {"sync.compression", {.kind = Kind::String, .fallback = "none", .choices = spellings<Compression>(),
          .doc = "16-bit gradients on the wire (sums still formed in fp32)"}},
        {"sync.backward_passes_per_step", {.kind = Kind::Int, .fallback = 1, .min = 1, .max = 1 << 16,
          .doc = "gradient accumulation: k local backward passes per allreduce and update"}},
        {"sync.mode", {.kind = Kind::String, .fallback = "allreduce", .choices = spellings<SyncMode>(),
          .doc = "allreduce: average gradients every step; local_sgd: step locally, "
                  "average parameters every local_sgd_period steps"}},
        {"sync.local_sgd_period", {.kind = Kind::Int, .fallback = 8, .min = 1,
          .doc = "local_sgd: steps between parameter averaging"}},
        {"sync.stall_warning_s", {.kind = Kind::Number, .fallback = 60.0, .min = 0.0,
          .doc = "warn (on every waiting rank) when a collective has not finished after this long (0 = never)"}},
        {"sync.stall_abort_s", {.kind = Kind::Number, .fallback = 600.0, .min = 0.0,
          .doc = "abort the job when a collective is stuck this long (0 = never)"}},
        {"sync.setup_timeout_s", {.kind = Kind::Number, .fallback = 300.0, .min = 0.0,
          .doc = "abort the job when set-up (data, model, the ranks' agreement) takes longer (0 = never)"}},
        {"sync.sparse", {.kind = Kind::String, .fallback = "auto", .choices = spellings<SparseSync>(),
          .doc = "libsvm/criteo: combine gradient rows by allgather, by a dense allreduce, or per step by "
                  "whichever moves fewer bytes (auto)"}},
        {"checkpoint.every_epochs", {.kind = Kind::Int, .fallback = 1, .min = 0,
          .doc = "write a checkpoint every k epochs (0 = never)"}},
        {"checkpoint.every_steps", {.kind = Kind::Int, .fallback = 0, .min = 0,
          .doc = "write a checkpoint every k steps (0 = never)"}},
        {"checkpoint.keep", {.kind = Kind::Int, .fallback = 3, .min = 1, .doc = "how many recent checkpoints to keep"}},
        {"checkpoint.resume", {.kind = Kind::String, .fallback = "",
          .doc = "\"\" = fresh start, \"auto\" = latest in output.dir, or a path"}},
        {"output.dir", {.kind = Kind::String, .fallback = "runs/default", .nonempty = true,
          .doc = "where rank 0 writes summary, metrics, checkpoints"}},
        {"output.timeline", {.kind = Kind::String, .fallback = "",
          .doc = "write a Chrome trace (chrome://tracing, Perfetto) of every rank's steps to this file"}},
        {"output.progress", {.kind = Kind::String, .fallback = "auto", .choices = spellings<ProgressMode>(),
          .doc = "progress on stderr: live bar on a terminal, lines in a pipe"}},
        {"output.tensorboard", {.kind = Kind::Bool, .fallback = false,
          .doc = "rank 0 writes TensorBoard event files (scalars per logged step and epoch) into output.dir/tensorboard"}},
    };
    return s;
}

std::string kind_name(Kind k) {
    switch (k) {
        case Kind::Int: return "an integer";
        case Kind::Number: return "a number";
        case Kind::Bool: return "true or false";
        case Kind::String: return "a string";
        case Kind::IntArray: return "an array of integers";
    }
    return "?";
}

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return s;
}

json::json_pointer pointer(const std::string& key) {
    std::string p;
    std::stringstream ss(key);
    std::string part;
    while (std::getline(ss, part, '.')) p += "/" + part;
    return json::json_pointer(p);
}

void check_value(const std::string& src, const std::string& key, const KeySpec& spec, const json& v) {
    const std::string where = src + ": " + key;
    if (v.is_null()) {
        if (spec.nullable) return;
        throw InputError(where + ": expected " + kind_name(spec.kind) + ", got null");
    }
    bool ok = false;
    switch (spec.kind) {
        case Kind::Int: ok = v.is_number_integer(); break;
        case Kind::Number: ok = v.is_number(); break;
        case Kind::Bool: ok = v.is_boolean(); break;
        case Kind::String: ok = v.is_string(); break;
        case Kind::IntArray:
            ok = v.is_array() && !v.empty();
            if (ok)
                for (const auto& e : v) ok = ok && e.is_number_integer();
            break;
    }
    if (!ok) throw InputError(where + ": expected " + kind_name(spec.kind) + ", got " + json_excerpt(v));
    auto range_check = [&](const json& e) {
        // Integer keys are read as int64: an unsigned JSON number above its range would wrap (2^64-1 -> -1).
        const bool past_int64 = spec.kind != Kind::Number && e.is_number_unsigned() &&
                                e.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
        const double x = e.get<double>();
        if (past_int64 || (spec.min && x < *spec.min) || (spec.max && x > *spec.max)) {
            std::ostringstream os;
            os << where << ": " << json_excerpt(v) << " is out of range; allowed";
            if (spec.min) os << " >= " << *spec.min;
            if (spec.min && (spec.max || spec.kind != Kind::Number)) os << " and";
            if (spec.max)
                os << " <= " << *spec.max;
            else if (spec.kind != Kind::Number)
                os << " <= " << std::numeric_limits<int64_t>::max();
            throw InputError(os.str());
        }
    };
    if (spec.kind == Kind::Int || spec.kind == Kind::Number) range_check(v);
    if (spec.kind == Kind::IntArray)
        for (const auto& e : v) range_check(e);
    if (spec.nonempty && v.get<std::string>().empty())
        throw InputError(where + ": must not be empty; give a path (" + spec.doc + ")");
    if (!spec.choices.empty() &&
        std::find(spec.choices.begin(), spec.choices.end(), v.get<std::string>()) == spec.choices.end())
        throw InputError(where + ": '" + v.get<std::string>() + "' is not one of: " + join(spec.choices));
}

// Every leaf of the user's document must be a schema key; sections must be objects.
void check_known(const std::string& src, const json& node, const std::string& prefix) {
    for (auto it = node.begin(); it != node.end(); ++it) {
        const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
        if (schema().count(key)) continue;
        bool is_section = false;
        for (const auto& [k, _] : schema())
            if (k.rfind(key + ".", 0) == 0) is_section = true;
        if (!is_section) throw InputError(src + ": " + key + ": unknown key (see `ringtrain --help-config`)");
        if (!it->is_object())
            throw InputError(src + ": " + key + ": expected a section (a JSON object), got " + json_excerpt(*it));
        check_known(src, *it, key);
    }
}

json parse_override_value(const KeySpec& spec, const std::string& text) {
    if (spec.kind == Kind::String) {
        // Accept both bare words and JSON strings.
        if (text.size() >= 2 && text.front() == '"') {
            try {
                return parse_json_strictly(text, "--set");
            } catch (const InputError&) {
            }
        }
        return text;
    }
    try {
        return parse_json_strictly(text, "--set");
    } catch (const InputError&) {
        return text;  // reported as a type error by check_value (the strict parser bounds depth and numbers)
    }
}

// Keys that only make sense together, judged on the typed plan: the sparse formats (libsvm, criteo) run the sparse
// path, whose optimizers are sgd, adagrad and ftrl; the dense path has no adagrad or ftrl. A key the other path
// would silently ignore is refused, not dropped.
void check_combinations(const std::string& src, const RunPlan& p) {
    const std::string format = to_string(p.data.format);
    const std::string opt = to_string(p.optimizer.name);
    if (!p.data.is_sparse()) {
        if (p.optimizer.name == OptimizerName::Adagrad || p.optimizer.name == OptimizerName::Ftrl)
            throw InputError(src + ": optimizer.name: '" + opt + "' is for the sparse path (data.format libsvm or "
                             "criteo); with data.format '" + format + "' use sgd, adam or adadelta");
        return;
    }
    if (p.data.train_file.empty())
        throw InputError(src + ": data.train_file: missing; data.format '" + format + "' reads a training file");
    if (p.data.test_file.empty())
        throw InputError(src + ": data.test_file: missing; data.format '" + format + "' evaluates on a test file");
    if (p.optimizer.name == OptimizerName::Adam || p.optimizer.name == OptimizerName::Adadelta)
        throw InputError(src + ": optimizer.name: '" + opt + "' is not available on the sparse path (data.format '" +
                         format + "'); use sgd, adagrad or ftrl");
    auto refuse = [&](bool set, const std::string& key, const std::string& why) {
        if (set) throw InputError(src + ": " + key + ": not available with data.format '" + format + "'; " + why);
    };
    refuse(p.optimizer.momentum != 0.0 || p.optimizer.nesterov, "optimizer.momentum",
           "the sparse optimizers update only the rows a step touched; use adagrad or ftrl, or set it to 0");
    refuse(p.optimizer.weight_decay != 0.0, "optimizer.weight_decay", "use ftrl with optimizer.l2, or set it to 0");
    refuse(p.optimizer.warmup_epochs != 0.0, "optimizer.warmup_epochs",
           "the sparse path sets the rate once per epoch; set it to 0");
    refuse(p.sync.compression != Compression::None, "sync.compression", "sparse rows travel in float32; use none");
    refuse(p.sync.backward_passes_per_step != 1, "sync.backward_passes_per_step",
           "raise train.batch_size instead; set it to 1");
    refuse(p.sync.backend == Backend::Nccl, "sync.backend", "the sparse path runs on the CPU; use ring or mpi");
    refuse(p.device == DeviceChoice::Cuda, "device", "the sparse path runs on the CPU; use cpu or auto");
}

}  // namespace

Config Config::load(const std::string& path, const std::vector<std::string>& overrides) {
    json doc = read_json_file(path, "config file", "pass an existing file, e.g. configs/lenet5_fashion.json");
    Config c = from_json(std::move(doc), path, overrides);
    c.base_dir_ = fs::absolute(fs::path(path)).parent_path().string();
    return c;
}

Config Config::from_json(json doc, const std::string& source, const std::vector<std::string>& overrides) {
    if (!doc.is_object()) throw InputError(source + ": a config must be a JSON object");
    check_known(source, doc, "");
    std::map<std::string, std::string> given;  // key -> the override that set it
    for (const std::string& o : overrides) {
        const auto eq = o.find('=');
        if (eq == std::string::npos || eq == 0)
            throw InputError("--set " + o + ": expected key=value, e.g. --set train.epochs=2");
        const std::string key = o.substr(0, eq);
        auto it = schema().find(key);
        if (it == schema().end()) throw InputError("--set " + key + ": unknown key (see `ringtrain --help-config`)");
        // Two values for one key are a mistake in a script more often than an intent; taking the last hides it.
        if (const auto [prev, fresh] = given.emplace(key, o); !fresh)
            throw InputError("--set " + key + ": given twice (" + prev->second + ", then " + o + "); pass each key once");
        doc[pointer(key)] = parse_override_value(it->second, o.substr(eq + 1));
    }
    for (const auto& [key, spec] : schema()) {
        const auto ptr = pointer(key);
        if (doc.contains(ptr)) {
            check_value(source, key, spec, doc[ptr]);
        } else if (spec.fallback.is_null() && !spec.nullable) {
            throw InputError(source + ": " + key + ": missing; it is required (" + spec.doc + ")");
        } else {
            doc[ptr] = spec.fallback;
        }
    }
    Config c;
    c.doc_ = std::move(doc);
    c.source_ = source;
    c.base_dir_ = fs::current_path().string();
    c.plan_ = RunPlan::from(c);
    check_combinations(source, c.plan_);
    return c;
}

namespace {
const json& lookup(const json& doc, const std::string& key) {
    if (!schema().count(key)) throw Error("internal: config key '" + key + "' is not in the schema");
    return doc.at(pointer(key));
}
}  // namespace

int64_t Config::integer(const std::string& key) const { return lookup(doc_, key).get<int64_t>(); }
double Config::number(const std::string& key) const { return lookup(doc_, key).get<double>(); }
bool Config::boolean(const std::string& key) const { return lookup(doc_, key).get<bool>(); }
std::string Config::string(const std::string& key) const { return lookup(doc_, key).get<std::string>(); }
bool Config::is_null(const std::string& key) const { return lookup(doc_, key).is_null(); }
std::vector<int64_t> Config::integers(const std::string& key) const {
    return lookup(doc_, key).get<std::vector<int64_t>>();
}

std::string Config::model_path() const {
    const fs::path m = string("model");
    std::vector<fs::path> tries;
    if (m.is_absolute()) {
        tries.push_back(m);
    } else {
        tries.push_back(fs::current_path() / m);
        tries.push_back(fs::path(base_dir_) / m);
        tries.push_back(fs::path(base_dir_).parent_path() / m);  // configs/ sits beside models/
#ifdef RINGTRAIN_SOURCE_DIR
        tries.push_back(fs::path(RINGTRAIN_SOURCE_DIR) / m);
#endif
    }
    for (const auto& t : tries)
        if (fs::is_regular_file(t)) return fs::absolute(t).lexically_normal().string();
    for (const auto& t : tries)
        if (fs::is_directory(t))
            throw InputError(source_ + ": model: '" + t.string() + "' is a directory, not a model file; name a file "
                             "such as models/lenet5.json");
    std::string looked;  // one line: an error is one line
    for (const auto& t : tries) looked += (looked.empty() ? "" : ", ") + t.string();
    throw InputError(source_ + ": model: file '" + m.string() + "' not found; looked in " + looked);
}

std::string Config::schema_help() {
    std::ostringstream os;
    for (const auto& [key, spec] : schema()) {
        os << "  " << key << " (" << kind_name(spec.kind);
        if (!spec.choices.empty()) os << ": " << join(spec.choices);
        os << ")";
        if (spec.fallback.is_null() && !spec.nullable)
            os << " required";
        else
            os << " default " << spec.fallback.dump();
        os << "\n      " << spec.doc << "\n";
    }
    return os.str();
}

}  // namespace ringtrain::train

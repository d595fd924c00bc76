#include "ringtrain/train/config.hpp"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <sstream>
#include <tuple>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/json_file.hpp"
#include "config_key_origin.hpp"
#include "config_schema.hpp"
#include "config_usage.hpp"

namespace ringtrain::train {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using detail::Kind;
using detail::KeyOrigin;
using detail::KeySpec;
using detail::schema;

std::string kind_name(Kind k) {
    switch (k) {
        case Kind::Int: return "an integer";
        case Kind::Number: return "a number";
        case Kind::Bool: return "true or false";
        case Kind::String: return "a string";
        case Kind::IntArray: return "an array of integers";
        case Kind::NumberArray: return "an array of numbers";
        case Kind::NumberOrArray: return "a number or an array of numbers";
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
        case Kind::NumberArray:
        case Kind::NumberOrArray:
            ok = (spec.kind == Kind::NumberOrArray && v.is_number()) || (v.is_array() && !v.empty());
            if (ok && v.is_array())
                for (const auto& e : v) ok = ok && e.is_number();
            break;
    }
    if (!ok) throw InputError(where + ": expected " + kind_name(spec.kind) + ", got " + json_excerpt(v));
    if (spec.length && v.is_array() && v.size() != spec.length)
        throw InputError(where + ": expected " + std::to_string(spec.length) + " entries, got " + json_excerpt(v) +
                         " (" + spec.doc + ")");
    const bool integral = spec.kind == Kind::Int || spec.kind == Kind::IntArray;
    auto range_check = [&](const json& e) {
        // Integer keys are read as int64: an unsigned JSON number above its range would wrap (2^64-1 -> -1).
        const bool past_int64 = integral && e.is_number_unsigned() &&
                                e.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
        const double x = e.get<double>();
        if (past_int64 || (spec.min && x < *spec.min) || (spec.max && x > *spec.max)) {
            std::ostringstream os;
            os.precision(15);  // 1048576, not 1.04858e+06
            os << where << ": " << json_excerpt(v) << " is out of range; allowed";
            if (spec.min) os << " >= " << *spec.min;
            if (spec.min && (spec.max || integral)) os << " and";
            if (spec.max)
                os << " <= " << *spec.max;
            else if (integral)
                os << " <= " << std::numeric_limits<int64_t>::max();
            throw InputError(os.str());
        }
    };
    if (v.is_number()) range_check(v);
    if (v.is_array())
        for (const auto& e : v) range_check(e);
    if (spec.nonempty && v.get<std::string>().empty())
        throw InputError(where + ": must not be empty; give a path (" + spec.doc + ")");
    if (!spec.choices.empty() &&
        std::find(spec.choices.begin(), spec.choices.end(), v.get<std::string>()) == spec.choices.end())
        throw InputError(where + ": '" + v.get<std::string>() + "' is not one of: " + join(spec.choices));
}

// A key as an error shows it: at most 64 bytes (a broken file can hold a megabyte-long one).
std::string shown_key(const std::string& key) { return key.size() <= 64 ? key : key.substr(0, 60) + "..."; }

// " (did you mean optimizer.lr?)" for a key the schema does not know: the key whose name is closest (edit distance
// at most a third of the name, or the same last part under another section), else nothing.
std::string did_you_mean(const std::string& key, bool sections_too) {
    if (key.size() > 64) return "";  // no key is this long; and the distance below costs len(key) x len(candidate)
    auto distance = [](const std::string& a, const std::string& b) {
        std::vector<size_t> row(b.size() + 1);
        for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
        for (size_t i = 1; i <= a.size(); ++i) {
            size_t diagonal = row[0];
            row[0] = i;
            for (size_t j = 1; j <= b.size(); ++j) {
                const size_t up = row[j];
                row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
                diagonal = up;
            }
        }
        return row[b.size()];
    };
    auto leaf = [](const std::string& k) { return k.substr(k.rfind('.') + 1); };
    std::set<std::string> candidates;  // every key, and every section (a misspelt section in a file: "optimiser")
    for (const auto& [k, spec] : schema())
        for (size_t dot = k.find('.'); ; dot = k.find('.', dot + 1)) {
            if (dot == std::string::npos) {
                candidates.insert(k);
                break;
            }
            if (sections_too) candidates.insert(k.substr(0, dot));
        }
    const auto dot = key.rfind('.');
    bool known_section = false;  // the key's section (all but its last part) is one the schema has
    if (dot != std::string::npos)
        for (const auto& [k, spec] : schema())
            if (k.rfind(key.substr(0, dot + 1), 0) == 0) known_section = true;
    std::vector<std::string> best;  // all at the smallest distance, up to 3
    const size_t limit = std::max<size_t>(1, key.size() / 3);  // farther than this is no longer a misspelling
    size_t best_d = limit + 1;
    for (const std::string& k : candidates) {
        const size_t gap = k.size() > key.size() ? k.size() - key.size() : key.size() - k.size();
        // The same last part under another section: for a bare name ("lr") or a misspelt section ("optimiser.lr"),
        // not for a known section's unknown key ("data.name" is not "optimizer.name").
        const bool same_leaf = k != key && (leaf(k) == key || (leaf(k) == leaf(key) && !known_section));
        if (!same_leaf && gap > std::min(best_d, limit)) continue;  // the length gap bounds the distance from below
        const size_t d = same_leaf ? 0 : distance(key, k);
        if (d > limit) continue;
        if (d < best_d) best_d = d, best.clear();
        if (d == best_d && best.size() < 3) best.push_back(k);
    }
    if (best.empty()) return "";
    std::string names;
    for (size_t i = 0; i < best.size(); ++i) names += (i == 0 ? "" : i + 1 == best.size() ? " or " : ", ") + best[i];
    return " (did you mean " + names + "?)";
}

// Checks every value `doc` gives (an error names it by where(key)) and fills in the schema's defaults; returns the
// keys it gave. A required key it lacks is an InputError naming `source`.
std::set<std::string> check_and_fill(json& doc, const std::string& source,
                                     const std::function<std::string(const std::string&)>& where) {
    std::set<std::string> present;
    for (const auto& [key, spec] : schema()) {
        const auto ptr = pointer(key);
        if (doc.contains(ptr)) {
            present.insert(key);
            check_value(where(key), key, spec, doc[ptr]);
        } else if (spec.fallback.is_null() && !spec.nullable) {
            throw InputError(source + ": " + key + ": missing; it is required (" + spec.doc + ")");
        } else {
            doc[ptr] = spec.fallback;
        }
    }
    return present;
}

// Every leaf of the user's document must be a schema key; sections must be objects.
void check_known(const std::string& src, const json& node, const std::string& prefix) {
    for (auto it = node.begin(); it != node.end(); ++it) {
        const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
        // "train.batch_size" as one name inside the file (the --set spelling) would match the schema here but is
        // never read: values are read section by section.
        if (const auto dot = it.key().find('.'); dot != std::string::npos) {
            std::string nested = "{\"" + it.key().substr(0, dot) + "\": {\"" + it.key().substr(dot + 1) + "\": ...}}";
            throw InputError(src + ": \"" + it.key() + "\"" + (prefix.empty() ? "" : " in " + prefix) +
                             ": a dotted name is the --set spelling; in a config file write sections, " + nested);
        }
        if (schema().count(key)) continue;
        bool is_section = false;
        for (const auto& [k, _] : schema())
            if (k.rfind(key + ".", 0) == 0) is_section = true;
        if (!is_section)
            throw InputError(src + ": " + shown_key(key) + ": unknown key" + did_you_mean(key, true) +
                             " (see `ringtrain --help-config`)");
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

// The values of data.mean / data.std and the image keys where the format reads them (a key the format would not read
// at all is config_usage.cpp's). Arrays are per channel: IDX has one channel, CIFAR-10 three (red, green, blue), an
// image folder data.channels.
void check_image_keys(const KeyOrigin& src, const DataPlan& d) {
    const std::string format = to_string(d.format);
    const bool folder = d.format == DataFormat::ImageFolder, cifar = d.format == DataFormat::Cifar10;
    const bool normalised = folder || cifar || d.format == DataFormat::Idx;  // the others: config_usage.cpp
    const std::tuple<const char*, const PerChannel*> norms[] = {{"data.mean", &d.mean}, {"data.std", &d.stddev}};
    for (const auto& [key, v] : norms) {
        const auto n = static_cast<int>(v->values.size());
        if (!normalised || v->scalar || n == (folder ? d.channels : cifar ? 3 : 1)) continue;
        if (d.format == DataFormat::Idx)
            throw InputError(src(key) + ": " + key + ": data.format '" + format + "' normalises every channel alike; give "
                             "one number, not " + std::to_string(n));
        if (cifar)
            throw InputError(src(key) + ": " + key + ": " + std::to_string(n) + " values; CIFAR-10 images have 3 channels "
                             "(red, green, blue): give 3 values (e.g. [0.4914, 0.4822, 0.4465] for data.mean) or one "
                             "number for all");
        throw InputError(src(key) + ": " + key + ": " + std::to_string(n) + " values for data.channels " +
                         std::to_string(d.channels) + "; give one per channel (or one number for all)");
    }
    const bool resized_crop = d.augment_resized_crop.at(0) != 0.0 || d.augment_resized_crop.at(1) != 0.0;
    if (cifar) {
        if (d.image_size != std::vector<int64_t>{0, 0} && d.image_size != std::vector<int64_t>{32, 32})
            throw InputError(src("data.image_size") + ": data.image_size: " + json(d.image_size).dump() + ", but CIFAR-10 images are "
                             "32x32 and are not resized; remove it (or set [32, 32])");
        if (d.channels != 3)
            throw InputError(src("data.channels") + ": data.channels: " + std::to_string(d.channels) + ", but CIFAR-10 images are "
                             "RGB; remove it (or set 3)");
    }
    const double lo = d.augment_resized_crop.at(0), hi = d.augment_resized_crop.at(1);
    if (resized_crop && !(lo > 0.0 && lo <= hi))
        throw InputError(src("data.augment.random_resized_crop") + ": data.augment.random_resized_crop: [" + json(lo).dump() + ", " + json(hi).dump() +
                         "] is not [min_scale, max_scale] with 0 < min <= max <= 1 (or [0, 0] = off)");
    if (!folder) return;
    if (d.train_dir.empty())
        throw InputError(src("data.train_dir") + ": data.train_dir: missing; data.format 'image_folder' reads a folder with one "
                         "sub-folder of images per class");
    if (d.test_dir.empty())
        throw InputError(src("data.test_dir") + ": data.test_dir: missing; data.format 'image_folder' evaluates on a folder with the "
                         "same class sub-folders");
    if (d.image_size == std::vector<int64_t>{0, 0})
        throw InputError(src("data.image_size") + ": data.image_size: missing; give [height, width], the model's "
                         "input size (e.g. [64, 64])");
    if (d.image_size.at(0) < 1 || d.image_size.at(1) < 1)
        throw InputError(src("data.image_size") + ": data.image_size: " + json(d.image_size).dump() +
                         " is not a size; give [height, width], each at least 1 (e.g. [64, 64])");
    if (d.channels != 1 && d.channels != 3)
        throw InputError(src("data.channels") + ": data.channels: " + std::to_string(d.channels) + " is not 1 (grey) or 3 (RGB)");
}

// Values that only make sense together, judged on the typed plan: the sparse formats (libsvm, criteo) run the sparse
// path, whose optimizers are sgd, adagrad and ftrl, on the CPU; the dense path has no adagrad or ftrl. (A key the
// plan would not read at all is config_usage.cpp's.)
void check_combinations(const KeyOrigin& src, const RunPlan& p) {
    const std::string format = to_string(p.data.format);
    const std::string opt = to_string(p.optimizer.name);
    check_image_keys(src, p.data);
    if (!p.data.is_sparse()) {
        if (p.data.format == DataFormat::Synthetic) {
            // One sample's values, as every layer's output, are at most 2^31 - 1 (and the product must not wrap).
            int64_t values = 1;
            for (int64_t d : p.data.synthetic_shape)
                values = d > 0 && values > (int64_t{2147483647} / d) ? int64_t{2147483648} : values * d;
            if (values > 2147483647)
                throw InputError(src("data.synthetic_shape") + ": data.synthetic_shape: " +
                                 json(p.data.synthetic_shape).dump() + " is more than 2^31 - 1 values a sample; give a "
                                 "smaller shape (e.g. [1, 28, 28])");
        }
        if (p.optimizer.name == OptimizerName::Adagrad || p.optimizer.name == OptimizerName::Ftrl)
            throw InputError(src("optimizer.name") + ": optimizer.name: '" + opt + "' is for the sparse path (data.format libsvm or "
                             "criteo); with data.format '" + format + "' use sgd, adam or adadelta");
        // device auto may land on a CPU node or a GPU node with one config; an explicit cuda never runs it.
        if (p.train.cpu_precision != ops::CpuPrecision::Fp32 && p.device == DeviceChoice::Cuda)
            throw InputError(src("train.cpu_precision") + ": train.cpu_precision: '" + to_string(p.train.cpu_precision) +
                             "' is for CPU runs, and device is cuda; set it to fp32, or device to cpu or auto");
        return;
    }
    if (p.data.train_file.empty())
        throw InputError(src("data.train_file") + ": data.train_file: missing; data.format '" + format + "' reads a training file");
    if (p.data.test_file.empty())
        throw InputError(src("data.test_file") + ": data.test_file: missing; data.format '" + format + "' evaluates on a test file");
    if (p.optimizer.name == OptimizerName::Adam || p.optimizer.name == OptimizerName::Adadelta)
        throw InputError(src("optimizer.name") + ": optimizer.name: '" + opt + "' is not available on the sparse path (data.format '" +
                         format + "'); use sgd, adagrad or ftrl");
    auto refuse = [&](bool set, const std::string& key, const std::string& why) {
        if (set) throw InputError(src(key) + ": " + key + ": not available with data.format '" + format + "'; " + why);
    };
    refuse(p.sync.backend == Backend::Nccl, "sync.backend", "the sparse path runs on the CPU; use ring or mpi");
    refuse(p.device == DeviceChoice::Cuda, "device", "the sparse path runs on the CPU; use cpu or auto");
    // FTRL's per-coordinate rate is alpha / (beta + sqrt(n)) + l2: with both 0, a coordinate whose squared
    // gradients underflow to n = 0 divides by zero.
    if (p.optimizer.name == OptimizerName::Ftrl && p.optimizer.beta == 0.0 && p.optimizer.l2 == 0.0)
        throw InputError(src("optimizer.beta") + ": optimizer.beta: 0 with optimizer.l2 0 makes ftrl divide by zero on a coordinate "
                         "whose gradients are all tiny; set optimizer.beta above 0 (1 is usual) or optimizer.l2 above 0");
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
    const json file_doc = overrides.empty() ? json() : doc;  // before any --set: the file's own settings
    std::map<std::string, std::string> given;  // key -> the override that set it
    for (const std::string& o : overrides) {
        const auto eq = o.find('=');
        if (eq == std::string::npos || eq == 0)
            throw InputError("--set " + o + ": expected key=value, e.g. --set train.epochs=2");
        const std::string key = o.substr(0, eq);
        auto it = schema().find(key);
        if (it == schema().end()) {
            // A section (data.augment, sync, ...) is set key by key: name its keys instead of calling it unknown.
            std::string inside;
            for (const auto& [k, spec] : schema())
                if (k.rfind(key + ".", 0) == 0) inside += (inside.empty() ? "" : ", ") + k;
            if (!inside.empty())
                throw InputError("--set " + key + ": a section, not a key; set its keys one by one (" + inside + ")");
            throw InputError("--set " + shown_key(key) + ": unknown key" + did_you_mean(key, false) +
                             " (see `ringtrain --help-config`)");
        }
        // Two values for one key are a mistake in a script more often than an intent; taking the last hides it.
        if (const auto [prev, fresh] = given.emplace(key, o); !fresh)
            throw InputError("--set " + key + ": given twice (" + prev->second + ", then " + o + "); pass each key once");
        doc[pointer(key)] = parse_override_value(it->second, o.substr(eq + 1));
    }
    // A value from --set is named as such: the file may hold a valid one for the same key.
    std::set<std::string> present = check_and_fill(doc, source, [&](const std::string& key) {
        const auto from_set = given.find(key);
        return from_set == given.end() ? source : "--set " + from_set->second;
    });
    Config c;
    c.doc_ = std::move(doc);
    c.source_ = source;
    c.base_dir_ = fs::current_path().string();
    c.plan_ = RunPlan::from(c);
    c.set_values_ = given;
    c.given_ = present;
    const KeyOrigin origin(source, given, std::move(present));
    check_combinations(origin, c.plan_);
    const std::optional<RunPlan> file_plan = plan_of_file(file_doc);
    const auto unread = detail::check_unused_keys(origin, c.plan_, c.doc_, file_plan ? &*file_plan : nullptr);
    if (!unread.empty()) {
        // Ignored: the resolved config (info, summary.json, checkpoints) holds what ran, their defaults.
        for (const auto& u : unread) {
            c.doc_[pointer(u.key)] = schema().at(u.key).fallback;
            c.notes_.push_back(u.note);
        }
        c.plan_ = RunPlan::from(c);
    }
    return c;
}

// The plan of the config file alone (before --set), to tell a key that a --set left unread from one the file itself
// never reads; none where the file alone is not a complete, valid config.
std::optional<RunPlan> Config::plan_of_file(const json& file_doc) {
    if (file_doc.is_null()) return std::nullopt;
    try {
        Config f;
        f.doc_ = file_doc;
        check_and_fill(f.doc_, "", [](const std::string&) { return std::string(); });
        return RunPlan::from(f);
    } catch (const std::exception&) {
        return std::nullopt;
    }
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
std::vector<double> Config::numbers(const std::string& key) const {
    return lookup(doc_, key).get<std::vector<double>>();
}
bool Config::is_array(const std::string& key) const { return lookup(doc_, key).is_array(); }

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
    const std::string where = origin("model");
    for (const auto& t : tries)
        if (fs::is_directory(t))
            throw InputError(where + ": model: '" + t.string() + "' is a directory, not a model file; name a file "
                             "such as models/lenet5.json");
    std::string looked;  // one line: an error is one line; each place once
    std::vector<std::string> seen;
    for (const auto& t : tries) {
        const std::string place = fs::absolute(t).lexically_normal().string();
        if (std::find(seen.begin(), seen.end(), place) != seen.end()) continue;
        seen.push_back(place);
        looked += (looked.empty() ? "" : ", ") + place;
    }
    throw InputError(where + ": model: file '" + m.string() + "' not found; looked in " + looked);
}

std::string Config::origin(const std::string& key) const { return KeyOrigin(source_, set_values_, given_)(key); }

std::string Config::with_origin(const std::string& message) const {
    const auto colon = message.find(": ");
    if (colon == std::string::npos) return message;
    const std::string key = message.substr(0, colon);
    // Only a key the file or a --set gave: a default's value is in neither, and naming the file would send the user
    // looking there for it. A message that already says where (a config file named like a key) is left alone.
    const KeyOrigin where(source_, set_values_, given_);
    if (schema().count(key) == 0 || !where.given(key) || message.rfind(source_ + ": ", 0) == 0) return message;
    return where(key) + ": " + message;
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

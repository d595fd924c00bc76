// Experiment configuration: a JSON file checked against a schema of every known key (type, range, choices),
// with defaults filled in and `--set a.b=value` overrides. Errors name the key as a JSON path. A loaded Config
// carries its RunPlan: the same values parsed once into typed fields, which is what the rest of the code reads.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/train/run_plan.hpp"

namespace ringtrain::train {

class Config {
public:
    // Reads `path`, applies overrides ("a.b=value"), validates, fills defaults. Throws InputError.
    static Config load(const std::string& path, const std::vector<std::string>& overrides = {});
    // The same from an in-memory document (`source` names it in messages).
    static Config from_json(nlohmann::json doc, const std::string& source,
                            const std::vector<std::string>& overrides = {});

    // The typed run plan (parsed once, when the Config was made).
    const RunPlan& plan() const { return plan_; }

    // Typed access by dotted path ("train.batch_size"); the key must be in the schema. RunPlan::from reads the
    // config through these; everything else reads plan().
    int64_t integer(const std::string& key) const;
    double number(const std::string& key) const;
    bool boolean(const std::string& key) const;
    std::string string(const std::string& key) const;
    bool is_null(const std::string& key) const;
    std::vector<int64_t> integers(const std::string& key) const;
    std::vector<double> numbers(const std::string& key) const;  // an array of numbers
    bool is_array(const std::string& key) const;

    // The full document with defaults filled (written into summaries and checkpoints).
    const nlohmann::json& document() const { return doc_; }
    const std::string& source() const { return source_; }
    // Config keys this run ignores, one line each: values in the file that a --set made unused (the other cases are
    // refused). The command prints them before training.
    const std::vector<std::string>& notes() const { return notes_; }
    // Absolute path of the model architecture file (searched next to the config and in the source tree).
    std::string model_path() const;
    // Where a key's value came from, for an error about it: "--set KEY=VALUE", else the config file.
    std::string origin(const std::string& key) const;
    // An error message that begins "KEY: " for a key the file or a --set gave, with where its value came from in
    // front ("--set optimizer.lr=5: optimizer.lr: ..."); other messages (defaults' keys too) as they are. The checks
    // outside the config (the optimizer's, preflight's) name the key alone.
    std::string with_origin(const std::string& message) const;

    // Human-readable list of every key with type, default and meaning (for `ringtrain --help-config`).
    static std::string schema_help();

private:
    static std::optional<RunPlan> plan_of_file(const nlohmann::json& file_doc);

    nlohmann::json doc_;
    RunPlan plan_;
    std::string source_;
    std::map<std::string, std::string> set_values_;  // key -> "KEY=VALUE" of the --set that gave it
    std::set<std::string> given_;                     // keys the file or a --set gave (the rest are defaults)
    std::string base_dir_;
    std::vector<std::string> notes_;
};

}  // namespace ringtrain::train

// Checks that a run can go ahead, made on every rank after its data is loaded and before its model is built or
// anything is written: the output folder, both data splits against the model, and the memory the run needs.
// Each failure is one InputError naming the key or file at fault, so a bad run ends before step 1 with exit 2
// instead of writing outputs and failing at evaluation, or dying in std::bad_alloc.
#pragma once

#include <string>
#include <vector>

#include "ringtrain/nn/model.hpp"
#include "trainer_parts.hpp"

namespace ringtrain::train::detail {

void preflight(const TrainerParts& parts);

// The pieces, for tests and for callers that need only one.

// The data the config names is there, before any of it is read: data.dir (IDX, CIFAR-10), data.train_file and
// data.test_file (click logs). An InputError led by the key, so the CLI names the config file that gave it; relative
// paths are from the working directory, which the message names. (Image folders are checked by their scan.)
void check_data_paths(const DataPlan& data);

// Rank 0 writes into output.dir: it must be a folder, or creatable, and writable. Probed by making and removing a
// temporary folder, so nothing is left behind.
void check_output_dir(const std::string& dir);

// Both splits have the shape the model reads and labels its outputs and loss can take.
// `data_key` is the config key that names the data set (data.dir for IDX).
void check_splits(const Datasets& data, const nn::ModelFootprint& model, const std::string& model_path,
                  const std::string& data_key);

// The memory one rank needs, by part; each part names the key that sets its size.
struct MemoryPart {
    std::string what = {};  // "parameters, gradients and optimizer state"
    std::string key = {};   // what to change: a config key or a model file's layer
    std::string hint = {};  // how
    double bytes = 0;
    // The part's size at its key's smallest value (e.g. a batch of one); when even that does not fit, the
    // message names otherwise_key instead (e.g. the layer whose output is too large for any batch).
    double at_least = 0;
    std::string otherwise_key = {}, otherwise_hint = {};
};
std::vector<MemoryPart> estimate_memory(const RunPlan& plan, const Datasets& data, const nn::ModelFootprint& model);
// Throws InputError naming the largest part's key when the parts add up to more than `available_bytes`.
void check_memory(const std::vector<MemoryPart>& parts, double available_bytes, const std::string& available_what);
// check_memory against this host's physical memory shared by its `local_ranks` ranks (both paths' check).
void check_memory_on_host(const std::vector<MemoryPart>& parts, int local_ranks);

}  // namespace ringtrain::train::detail

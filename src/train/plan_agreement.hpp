// What every rank must hold the same before the first collective that depends on the run (private to train):
// the run plan key by key, the model file's content, the data sets' sizes and sample shape, the parameter list and
// the gradient buckets. Compared by sync::require_same_facts, which names the first difference on every rank.
#pragma once

#include <string>

#include "datasets.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/sync/consistency.hpp"
#include "ringtrain/train/run_plan.hpp"

namespace ringtrain::train::detail {

// In an order that names the cause before its effects: config keys first, then what they produce. Only
// output.progress and output.dir are left out (plan_agreement.cpp says why). `contents`: the data sets' fingerprints
// too (Dataset::fingerprint; a stat of some files for an image folder), which only several ranks need.
sync::Facts facts_to_agree(const RunPlan& plan, const std::string& model_path, const Datasets& data,
                           const nn::Model& model, bool contents);

// The sparse path's facts: the plan key by key, the model file's content, the feature count the data gave, the
// training and test files' sizes in bytes (the row counts are known only by reading the files, which the ranks
// stream; equal sizes of one path stand for equal files), then the tensors (table, bias, optimizer state).
// A file as checkpoints and the ranks' agreement record it: its size and a hash of its first and last 4 KiB. Cheap at
// any size, and enough to tell another file, or one rewritten since, from the one a run read. InputError when it
// cannot be read.
std::string file_fingerprint(const std::string& path);

sync::Facts sparse_facts_to_agree(const RunPlan& plan, const std::string& model_path, int64_t num_features,
                                  const std::vector<nn::Parameter*>& tensors, const std::string& optimizer);

}  // namespace ringtrain::train::detail

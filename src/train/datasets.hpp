// The data side of a run plan (private to train): the training and test Datasets it names, and the loader
// options for each, built once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/tensor.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/data/sharded_loader.hpp"
#include "ringtrain/train/run_plan.hpp"

namespace ringtrain::train::detail {

struct Datasets {
    std::unique_ptr<data::Dataset> train, test;
    // image_folder with data.skip_bad_files: the files this rank found undecodable in its share of each split
    // (indices into the split as scanned), until settle_bad_files; then every rank's, as paths.
    std::vector<int64_t> bad_train, bad_test;
    std::string first_bad_reason;  // this rank's first, for the report
    std::vector<std::string> skipped;  // after settle_bad_files: the files every rank left out (training, then test)
};

// Reads the data the plan names. image_folder with data.skip_bad_files: rank `rank` of `world` also decodes its
// share of both splits' files (on data.workers threads) and records the ones that fail; nothing is dropped yet.
// Without `check_training_files` (an evaluation, which needs only the training split's class names) only the test
// split's files are checked.
Datasets make_datasets(const RunPlan& plan, int rank = 0, int world = 1, bool check_training_files = true);

// Collective (image_folder with data.skip_bad_files; otherwise it returns at once): every rank's bad files are
// gathered and every rank drops the same ones before any loader is built, so the ranks keep one numbering of the
// samples; rank 0 reports them once on stderr. A training class left without files is a CollectiveInputError.
void settle_bad_files(Datasets& data, const RunPlan& plan, comm::Communicator& comm);

// image_folder: the model file's declared input must be {data.channels, H, W} of data.image_size (InputError naming
// both). Other formats: nothing to check.
void check_image_input(const RunPlan& plan, const std::string& model_path);

// Train mode: train.batch_size, shuffled by train.seed; Eval mode: train.eval_batch_size. Both: this rank's
// share, data.workers, and data.prefetch where it can pay on `device` (see datasets.cpp).
data::LoaderOptions loader_options(const RunPlan& plan, data::LoaderMode mode, int rank, int world, Device device);

}  // namespace ringtrain::train::detail

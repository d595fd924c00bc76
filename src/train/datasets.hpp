// The data side of a run plan (private to train): the training and test Datasets it names, and the loader
// options for each, built once.
#pragma once

#include <memory>

#include "ringtrain/core/tensor.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/data/sharded_loader.hpp"
#include "ringtrain/train/run_plan.hpp"

namespace ringtrain::train::detail {

struct Datasets {
    std::unique_ptr<data::Dataset> train, test;
};

Datasets make_datasets(const RunPlan& plan);

// Train mode: train.batch_size, shuffled by train.seed; Eval mode: train.eval_batch_size. Both: this rank's
// share, data.workers, and data.prefetch where it can pay on `device` (see datasets.cpp).
data::LoaderOptions loader_options(const RunPlan& plan, data::LoaderMode mode, int rank, int world, Device device);

}  // namespace ringtrain::train::detail

// Builds the training and test Datasets a config names (private to train).
#pragma once

#include <memory>

#include "ringtrain/data/dataset.hpp"
#include "ringtrain/train/config.hpp"

namespace ringtrain::train::detail {

struct Datasets {
    std::unique_ptr<data::Dataset> train, test;
};

Datasets make_datasets(const Config& c);

}  // namespace ringtrain::train::detail

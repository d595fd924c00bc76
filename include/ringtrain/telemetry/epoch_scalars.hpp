// The TensorBoard scalars every training loop (dense and sparse) logs at an epoch's end, built in one place so the
// two paths keep the same tags.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/telemetry/phases.hpp"
#include "ringtrain/telemetry/tensorboard_writer.hpp"

namespace ringtrain::telemetry {

// epoch/train_loss; every numeric test_* value of `evaluation` as test/* (test_accuracy -> test/accuracy; a null,
// e.g. AUC with one class, is left out; test_samples is not a metric); time/<phase>_s for each phase; time/train_s.
std::vector<Scalar> epoch_scalars(double train_loss, const nlohmann::json& evaluation, const PhaseTimes& phases,
                                  double train_seconds);

}  // namespace ringtrain::telemetry

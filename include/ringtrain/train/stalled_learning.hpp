// A run whose model learnt nothing: test accuracy at chance and a training loss at that of a uniform guess. Where a
// scaling study's point shows it (LeNet-5 with Adam at 8 ranks: lr 0.001 x 8 under lr_scaling linear, test accuracy
// 0.098 of 10 classes), the throughput is still measured, but the user needs to know, and why: the learning rate the
// scaling rule gave. Built from summary.json's figures; the CLI prints it after the run.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ringtrain::train {

struct LearningFacts {
    int64_t classes = 0;          // the data set's; 2 with a one-output sigmoid_bce model
    bool binary_logistic = false;  // sigmoid_bce: the uniform guess's loss is ln 2, else ln(classes)
    double test_accuracy = 0;
    double train_loss = 0;        // mean over the last (or last partial) epoch
    double lr = 0;                // optimizer.lr as configured
    double lr_peak = 0;           // after the world-size rule
    std::string lr_scaling;       // linear, sqrt or none
    int world_size = 1;
    double warmup_epochs = 0;
    int64_t steps = 0;            // optimizer steps the model has had (all runs of it, resumed ones too)
};

// Fewer steps than this and a model at chance may simply not have started: no note.
inline constexpr int64_t kStalledLearningMinSteps = 30;
// A peak learning rate below this is named as too small rather than too large.
inline constexpr double kTooSmallLearningRate = 1e-5;

// The note when the model is at chance after kStalledLearningMinSteps steps or more: test accuracy at most
// 1.5 / classes and the training loss at least 0.95 of the uniform guess's (ln classes); nullopt otherwise, or with
// fewer than 2 classes.
std::optional<std::string> stalled_learning_note(const LearningFacts& f);

// summary.json's "learning_stalled" ("" when it is null or missing), for the line the CLI prints.
std::string describe_stalled_learning(const nlohmann::json& summary);

}  // namespace ringtrain::train

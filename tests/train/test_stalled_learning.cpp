// The note for a model at chance (train/stalled_learning.hpp): when it is given, and what it says about the
// learning rate the world-size rule gave.
#include <catch2/catch.hpp>

#include <cmath>

#include "ringtrain/train/stalled_learning.hpp"

using namespace ringtrain::train;
using Catch::Contains;

namespace {
// LeNet-5 with Adam at 8 ranks on the 16-vCPU host (bench/RESULTS.md, 2026-11-28 20:22): chance, loss ln 10.
LearningFacts eight_ranks_at_chance() {
    LearningFacts f;
    f.classes = 10;
    f.test_accuracy = 0.0977;
    f.train_loss = 2.3027;
    f.lr = 0.001;
    f.lr_peak = 0.008;
    f.lr_scaling = "linear";
    f.world_size = 8;
    f.steps = 40;
    return f;
}
}  // namespace

TEST_CASE("a model at chance gets a note naming the scaled learning rate and what to try", "[train][unit]") {
    const auto note = stalled_learning_note(eight_ranks_at_chance());
    REQUIRE(note);
    CHECK_THAT(*note, Contains("the model did not learn in 40 steps: test accuracy 0.098 where guessing gives 0.100") &&
                          Contains("train loss 2.303 (a uniform guess: 2.303)") &&
                          Contains("the learning rate was 0.008 (optimizer.lr 0.001 scaled for 8 ranks, lr_scaling "
                                   "linear); try optimizer.warmup_epochs"));
    CHECK(describe_stalled_learning({{"learning_stalled", *note}}) == "note: " + *note);

    LearningFacts warm = eight_ranks_at_chance();
    warm.warmup_epochs = 5;  // warmup already on: not suggested again
    CHECK_THAT(*stalled_learning_note(warm), Contains("try lr_scaling sqrt or a smaller optimizer.lr") &&
                                                 !Contains("warmup"));

    LearningFacts one = eight_ranks_at_chance();
    one.world_size = 1;
    one.lr_peak = one.lr = 0.008;
    CHECK_THAT(*stalled_learning_note(one), Contains("the learning rate was 0.008; try a smaller optimizer.lr"));

    // A rate far too small to move the model is named as such, not as too large (it said "try a smaller" at 1e-9).
    LearningFacts tiny = one;
    tiny.lr_peak = tiny.lr = 1e-9;
    CHECK_THAT(*stalled_learning_note(tiny), Contains("the learning rate was 1e-09; a rate this small barely moves "
                                                      "the model: try a larger optimizer.lr") &&
                                                 !Contains("smaller"));
}

TEST_CASE("no note for a model that learnt, or without the figures to tell", "[train][unit]") {
    LearningFacts f = eight_ranks_at_chance();
    f.test_accuracy = 0.151;  // above 1.5 x chance
    CHECK_FALSE(stalled_learning_note(f));
    f = eight_ranks_at_chance();
    f.train_loss = 0.9 * std::log(10.0);  // training loss well below a uniform guess's: it is learning
    CHECK_FALSE(stalled_learning_note(f));
    f = eight_ranks_at_chance();
    f.train_loss = std::nan("");
    CHECK_FALSE(stalled_learning_note(f));
    f = eight_ranks_at_chance();
    f.classes = 1;
    CHECK_FALSE(stalled_learning_note(f));
    f = eight_ranks_at_chance();
    f.steps = kStalledLearningMinSteps - 1;  // a few steps in, every model is at chance
    CHECK_FALSE(stalled_learning_note(f));
    CHECK(describe_stalled_learning({{"learning_stalled", nullptr}}).empty());
    CHECK(describe_stalled_learning({{"world_size", 1}}).empty());
}

TEST_CASE("a one-output sigmoid_bce model is at chance at 0.5 and ln 2", "[train][unit]") {
    LearningFacts f;
    f.classes = 2;
    f.binary_logistic = true;
    f.test_accuracy = 0.5;
    f.train_loss = 0.6931;
    f.lr = f.lr_peak = 1.0;
    f.lr_scaling = "none";
    f.steps = 100;
    const auto note = stalled_learning_note(f);
    REQUIRE(note);
    CHECK_THAT(*note, Contains("guessing gives 0.500") && Contains("a uniform guess: 0.693"));
    f.train_loss = 0.5;
    CHECK_FALSE(stalled_learning_note(f));
}

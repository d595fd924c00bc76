#include "ringtrain/train/stalled_learning.hpp"

#include <cmath>
#include <cstdio>

namespace ringtrain::train {

std::optional<std::string> stalled_learning_note(const LearningFacts& f) {
    if (f.classes < 2 || f.steps < kStalledLearningMinSteps || !std::isfinite(f.test_accuracy) ||
        !std::isfinite(f.train_loss))
        return std::nullopt;
    const double chance = 1.0 / static_cast<double>(f.classes);
    const double uniform_loss = std::log(f.binary_logistic ? 2.0 : static_cast<double>(f.classes));
    if (f.test_accuracy > 1.5 * chance || f.train_loss < 0.95 * uniform_loss) return std::nullopt;
    char text[640];
    int n = std::snprintf(text, sizeof text,
                          "the model did not learn in %lld steps: test accuracy %.3f where guessing gives %.3f, "
                          "train loss %.3f (a uniform guess: %.3f); the learning rate was %g",
                          static_cast<long long>(f.steps), f.test_accuracy, chance, f.train_loss, uniform_loss,
                          f.lr_peak);
    std::string note(text, static_cast<size_t>(std::max(n, 0)));
    // Far below any rate that trains (Adam's usual 1e-3, SGD's 0.01-0.1): the model barely moved. Above it, a
    // stalled model is most often one whose units a too large rate killed (the scaled rate of many ranks).
    if (f.lr_peak < kTooSmallLearningRate) {
        note += "; a rate this small barely moves the model: try a larger optimizer.lr (Adam's usual 1e-3, SGD's "
                "0.01 to 0.1)";
        return note;
    }
    if (f.world_size > 1 && f.lr_scaling != "none" && f.lr_peak != f.lr) {
        std::snprintf(text, sizeof text, " (optimizer.lr %g scaled for %d ranks, lr_scaling %s)", f.lr, f.world_size,
                      f.lr_scaling.c_str());
        note += text;
        note += f.warmup_epochs > 0 ? "; try lr_scaling sqrt or a smaller optimizer.lr"
                                    : "; try optimizer.warmup_epochs (Goyal et al.'s 5), lr_scaling sqrt or a smaller "
                                      "optimizer.lr";
    } else {
        note += "; try a smaller optimizer.lr";
    }
    return note;
}

std::string describe_stalled_learning(const nlohmann::json& summary) {
    const auto it = summary.find("learning_stalled");
    if (it == summary.end() || !it->is_string()) return "";
    return "note: " + it->get<std::string>();
}

}  // namespace ringtrain::train

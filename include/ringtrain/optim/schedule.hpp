// Learning-rate schedule: world-size scaling (linear, sqrt, none), gradual warmup from the unscaled rate
// (Goyal et al.; Horovod's LearningRateWarmupCallback), then constant, step or cosine decay.
#pragma once

#include <string>

namespace ringtrain::optim {

struct ScheduleOptions {
    float lr = 0.01f;                   // the single-rank (unscaled) learning rate from the config
    std::string scaling = "linear";     // linear: lr*N, sqrt: lr*sqrt(N), none: lr
    std::string decay = "constant";     // constant | step | cosine
    double warmup_epochs = 0.0;         // 0 = no warmup
    double warmup_start_lr = -1.0;      // < 0: start the warmup from the unscaled lr
    double step_epochs = 30.0;          // step decay: multiply by gamma every step_epochs
    double gamma = 0.1;
    double min_lr_factor = 0.0;         // cosine decays to min_lr_factor * peak
    double total_epochs = 1.0;          // cosine horizon
};

class LrSchedule {
public:
    LrSchedule(ScheduleOptions opt, int world_size);
    // Learning rate at a (fractional) epoch position, e.g. 1.5 = half-way through the second epoch.
    float at(double epoch) const;
    // The rate after scaling and before decay (what warmup reaches).
    float peak() const { return peak_; }

private:
    ScheduleOptions opt_;
    float peak_;
};

}  // namespace ringtrain::optim

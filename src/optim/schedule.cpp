#include "ringtrain/optim/schedule.hpp"

#include <algorithm>
#include <cmath>

#include "ringtrain/core/error.hpp"

namespace ringtrain::optim {

LrSchedule::LrSchedule(ScheduleOptions opt, int world_size) : opt_(std::move(opt)) {
    const double n = world_size;
    if (opt_.scaling == "linear")
        peak_ = static_cast<float>(opt_.lr * n);
    else if (opt_.scaling == "sqrt")
        peak_ = static_cast<float>(opt_.lr * std::sqrt(n));
    else if (opt_.scaling == "none")
        peak_ = opt_.lr;
    else
        throw InputError("optimizer.lr_scaling: unknown rule '" + opt_.scaling + "'; use linear, sqrt or none");
    if (opt_.decay != "constant" && opt_.decay != "step" && opt_.decay != "cosine")
        throw InputError("optimizer.schedule: unknown schedule '" + opt_.decay + "'; use constant, step or cosine");
}

float LrSchedule::at(double epoch) const {
    if (opt_.warmup_epochs > 0 && epoch < opt_.warmup_epochs) {
        const double start = opt_.warmup_start_lr >= 0 ? opt_.warmup_start_lr : opt_.lr;
        return static_cast<float>(start + (peak_ - start) * epoch / opt_.warmup_epochs);
    }
    double factor = 1.0;
    if (opt_.decay == "step") {
        factor = std::pow(opt_.gamma, std::floor(epoch / opt_.step_epochs));
    } else if (opt_.decay == "cosine") {
        const double span = std::max(opt_.total_epochs - opt_.warmup_epochs, 1e-9);
        const double t = std::clamp((epoch - opt_.warmup_epochs) / span, 0.0, 1.0);
        factor = opt_.min_lr_factor + (1.0 - opt_.min_lr_factor) * 0.5 * (1.0 + std::cos(M_PI * t));
    }
    return static_cast<float>(peak_ * factor);
}

}  // namespace ringtrain::optim

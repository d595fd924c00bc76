#include "ringtrain/telemetry/phases.hpp"

namespace ringtrain::telemetry {

const char* phase_name(Phase p) {
    switch (p) {
        case Phase::Data: return "data";
        case Phase::Forward: return "forward";
        case Phase::Backward: return "backward";
        case Phase::SyncWait: return "sync_wait";
        case Phase::Optimizer: return "optimizer";
        case Phase::Count: break;
    }
    return "?";
}

double PhaseTimes::total() const {
    double t = 0;
    for (double v : s_) t += v;
    return t;
}

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace ringtrain::telemetry

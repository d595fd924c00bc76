// Seconds on the steady clock: the one time base of the sync layer's ages, ready times and durations.
#pragma once

#include <chrono>

namespace ringtrain::sync {

inline double mono_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace ringtrain::sync

// AddSeconds: adds the wall-clock seconds a scope took to a running total, however the scope is left (the
// checkpoints' time in summary.json's checkpoint_s, on both training paths).
#pragma once

#include "ringtrain/telemetry/phases.hpp"

namespace ringtrain::train::detail {

class AddSeconds {
public:
    explicit AddSeconds(double& total) : total_(total), t0_(telemetry::now_seconds()) {}
    ~AddSeconds() { total_ += telemetry::now_seconds() - t0_; }
    AddSeconds(const AddSeconds&) = delete;
    AddSeconds& operator=(const AddSeconds&) = delete;

private:
    double& total_;
    double t0_;
};

}  // namespace ringtrain::train::detail

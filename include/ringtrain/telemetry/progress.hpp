// Progress reporting on stderr: a live bar when stderr is a terminal, one line every N steps in a pipe
// (Slurm output files stay readable), nothing when disabled. Only rank 0 constructs an enabled one.
#pragma once

#include <cstdint>
#include <string>

namespace ringtrain::telemetry {

class Progress {
public:
    // mode: "auto" | "bar" | "lines" | "none"
    Progress(const std::string& mode, bool enabled, int64_t every_steps);
    void step(int64_t epoch, int64_t epochs, int64_t step_in_epoch, int64_t steps_per_epoch, double loss,
              double samples_per_s);
    // A full line (epoch results, warnings) that does not collide with the bar.
    void line(const std::string& text);
    void finish();

private:
    bool bar_ = false;
    bool enabled_ = false;
    bool bar_open_ = false;
    int64_t every_;
};

}  // namespace ringtrain::telemetry

// Process resource use for the run summary: CPU time and peak resident memory.
// Read from getrusage, so it costs nothing during training.
#pragma once

namespace ringtrain::telemetry {

struct ResourceUsage {
    double cpu_user_s = 0.0;
    double cpu_system_s = 0.0;
    double peak_rss_mb = 0.0;
};

ResourceUsage current_resource_usage();

}  // namespace ringtrain::telemetry

#include "ringtrain/telemetry/resources.hpp"

#include <sys/resource.h>

namespace ringtrain::telemetry {

ResourceUsage current_resource_usage() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    ResourceUsage r;
    r.cpu_user_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6;
    r.cpu_system_s = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    r.peak_rss_mb = ru.ru_maxrss / 1024.0;  // Linux reports KiB
    return r;
}

}  // namespace ringtrain::telemetry

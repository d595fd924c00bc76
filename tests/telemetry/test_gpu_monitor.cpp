// GpuMonitor's failure path, which every machine can run: a device NVML cannot find (or no NVML at all) gives no
// monitor and a reason that names NVML, never a crash. The sampling path is checked on a GPU by tests/gpu.
#include <catch2/catch.hpp>

#include <string>

#include "ringtrain/telemetry/gpu_monitor.hpp"

using namespace ringtrain;

TEST_CASE("GpuMonitor: an unknown device (or no NVML) gives no monitor and says why", "[telemetry][gpu_monitor]") {
    std::string why;
    auto monitor = telemetry::GpuMonitor::open("not-a-pci-bus-id", &why);
    REQUIRE(monitor == nullptr);
    INFO(why);
    CHECK(why.find("NVML") != std::string::npos);
    // With the driver's library present the reason is the bus id; without it, the missing library.
    const bool names_the_device = why.find("not-a-pci-bus-id") != std::string::npos;
    const bool names_the_library = why.find("libnvidia-ml.so.1") != std::string::npos;
    CHECK((names_the_device || names_the_library));
    // A null reason pointer is allowed.
    CHECK(telemetry::GpuMonitor::open("not-a-pci-bus-id", nullptr) == nullptr);
}

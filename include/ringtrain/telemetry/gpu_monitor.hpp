// GpuMonitor: samples a GPU's utilisation and memory through NVML while training runs, for the run summary.
// NVML comes with the NVIDIA driver (libnvidia-ml.so.1) and is loaded at run time, so builds and CPU-only machines
// need neither its header nor its library; where it is missing, open() says why and the summary says so.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace ringtrain::telemetry {

struct GpuUsage {
    uint64_t samples = 0;
    double mean_gpu_percent = 0;     // NVML "gpu" utilisation: share of time a kernel was running
    double max_gpu_percent = 0;
    double mean_memory_percent = 0;  // share of time device memory was being read or written
    double peak_used_mb = 0;         // device memory in use by every process (NVML's view, not just our allocator)
    double total_mb = 0;
};

class GpuMonitor {
public:
    // The device with this PCI bus id (as CUDA reports it); nullptr, with the reason in *why_not, when NVML cannot
    // be loaded or does not know the device.
    static std::unique_ptr<GpuMonitor> open(const std::string& pci_bus_id, std::string* why_not);
    ~GpuMonitor();
    GpuMonitor(const GpuMonitor&) = delete;
    GpuMonitor& operator=(const GpuMonitor&) = delete;

    // Samples every interval_s on a thread of its own until stop() (or destruction).
    void start(double interval_s = 0.1);
    void stop();
    GpuUsage usage() const;

private:
    struct Nvml;
    explicit GpuMonitor(std::unique_ptr<Nvml> nvml);
    void sample();

    std::unique_ptr<Nvml> nvml_;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    bool stop_ = false;
    GpuUsage usage_;
    double gpu_sum_ = 0, memory_sum_ = 0;
    std::thread thread_;
};

}  // namespace ringtrain::telemetry

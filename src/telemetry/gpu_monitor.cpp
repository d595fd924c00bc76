// GpuMonitor over NVML loaded with dlopen. The few NVML entry points used are declared here with NVML's stable C ABI
// (nvml.h: nvmlReturn_t is an int-sized enum, nvmlDevice_t an opaque pointer, the two structs below).
#include "ringtrain/telemetry/gpu_monitor.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>

namespace ringtrain::telemetry {

namespace {
using NvmlReturn = int;  // NVML_SUCCESS = 0
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
    unsigned int gpu, memory;
};
struct NvmlMemory {
    unsigned long long total, free, used;
};
}  // namespace

struct GpuMonitor::Nvml {
    void* lib = nullptr;
    NvmlDevice device = nullptr;
    NvmlReturn (*init)() = nullptr;
    NvmlReturn (*shutdown)() = nullptr;
    NvmlReturn (*by_pci)(const char*, NvmlDevice*) = nullptr;
    NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
    NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
    const char* (*error_string)(NvmlReturn) = nullptr;
    bool initialised = false;

    ~Nvml() {
        if (initialised && shutdown) shutdown();
        if (lib) dlclose(lib);
    }
    std::string error(NvmlReturn rc) const {
        return error_string ? std::string(error_string(rc)) : "NVML error " + std::to_string(rc);
    }
};

std::unique_ptr<GpuMonitor> GpuMonitor::open(const std::string& pci_bus_id, std::string* why_not) {
    auto fail = [&](const std::string& why) {
        if (why_not) *why_not = why;
        return std::unique_ptr<GpuMonitor>();
    };
    auto nvml = std::make_unique<Nvml>();
    nvml->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nvml->lib) return fail("NVML not available (libnvidia-ml.so.1 comes with the NVIDIA driver): " + std::string(dlerror()));
    auto sym = [&](const char* name) { return dlsym(nvml->lib, name); };
    nvml->init = reinterpret_cast<NvmlReturn (*)()>(sym("nvmlInit_v2"));
    nvml->shutdown = reinterpret_cast<NvmlReturn (*)()>(sym("nvmlShutdown"));
    nvml->by_pci = reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    nvml->utilization = reinterpret_cast<NvmlReturn (*)(NvmlDevice, NvmlUtilization*)>(sym("nvmlDeviceGetUtilizationRates"));
    nvml->memory = reinterpret_cast<NvmlReturn (*)(NvmlDevice, NvmlMemory*)>(sym("nvmlDeviceGetMemoryInfo"));
    nvml->error_string = reinterpret_cast<const char* (*)(NvmlReturn)>(sym("nvmlErrorString"));
    if (!nvml->init || !nvml->shutdown || !nvml->by_pci || !nvml->utilization || !nvml->memory)
        return fail("libnvidia-ml.so.1 lacks an NVML function ringtrain uses (driver too old?)");
    if (const NvmlReturn rc = nvml->init(); rc != 0) return fail("nvmlInit failed: " + nvml->error(rc));
    nvml->initialised = true;
    if (const NvmlReturn rc = nvml->by_pci(pci_bus_id.c_str(), &nvml->device); rc != 0)
        return fail("NVML does not know the GPU at PCI bus id '" + pci_bus_id + "': " + nvml->error(rc));
    NvmlMemory m{};
    if (const NvmlReturn rc = nvml->memory(nvml->device, &m); rc != 0)
        return fail("nvmlDeviceGetMemoryInfo failed: " + nvml->error(rc));
    return std::unique_ptr<GpuMonitor>(new GpuMonitor(std::move(nvml)));
}

GpuMonitor::GpuMonitor(std::unique_ptr<Nvml> nvml) : nvml_(std::move(nvml)) {}

GpuMonitor::~GpuMonitor() { stop(); }

void GpuMonitor::sample() {
    NvmlUtilization u{};
    NvmlMemory m{};
    const bool have_u = nvml_->utilization(nvml_->device, &u) == 0;
    const bool have_m = nvml_->memory(nvml_->device, &m) == 0;
    std::lock_guard<std::mutex> lock(mutex_);
    if (have_u) {
        ++usage_.samples;
        gpu_sum_ += u.gpu;
        memory_sum_ += u.memory;
        usage_.max_gpu_percent = std::max(usage_.max_gpu_percent, static_cast<double>(u.gpu));
    }
    if (have_m) {
        usage_.peak_used_mb = std::max(usage_.peak_used_mb, static_cast<double>(m.used) / 1048576.0);
        usage_.total_mb = static_cast<double>(m.total) / 1048576.0;
    }
}

void GpuMonitor::start(double interval_s) {
    if (thread_.joinable()) return;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = false;
    }
    const auto interval = std::chrono::duration<double>(std::max(interval_s, 0.001));
    thread_ = std::thread([this, interval] {
        std::unique_lock<std::mutex> lock(mutex_);
        while (!stop_) {
            lock.unlock();
            sample();
            lock.lock();
            cv_.wait_for(lock, interval, [&] { return stop_; });
        }
    });
}

void GpuMonitor::stop() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

GpuUsage GpuMonitor::usage() const {
    std::lock_guard<std::mutex> lock(mutex_);
    GpuUsage u = usage_;
    if (u.samples > 0) {
        u.mean_gpu_percent = gpu_sum_ / static_cast<double>(u.samples);
        u.mean_memory_percent = memory_sum_ / static_cast<double>(u.samples);
    }
    return u;
}

}  // namespace ringtrain::telemetry

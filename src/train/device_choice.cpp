#include "ringtrain/train/device_choice.hpp"

#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"

namespace ringtrain::train {

Device pick_device(DeviceChoice choice) {
    switch (choice) {
        case DeviceChoice::Cuda:
            if (!cuda_available())
                throw InputError("device: cuda was asked for but this build has no CUDA support or no GPU is visible; "
                                 "set device to cpu or auto");
            return Device::CUDA;
        case DeviceChoice::Auto: return cuda_available() ? Device::CUDA : Device::CPU;
        case DeviceChoice::Cpu: break;
    }
    return Device::CPU;
}

std::string describe_device(DeviceChoice choice, int local_rank) {
    try {
        if (pick_device(choice) == Device::CPU) return "cpu";
        select_cuda_device(local_rank);
        return cuda_device_description();
    } catch (const Error& e) {
        return std::string("none (") + e.what() + ")";
    }
}

}  // namespace ringtrain::train

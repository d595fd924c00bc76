// The device a rank computes on: the plan's DeviceChoice met with what this process can see.
#pragma once

#include <string>

#include "ringtrain/core/tensor.hpp"
#include "ringtrain/train/run_plan.hpp"

namespace ringtrain::train {

// Auto: a visible GPU, else the CPU. Cuda without a usable GPU is an InputError that says what to set instead.
Device pick_device(DeviceChoice choice);

// In words, what this rank would compute on: "cpu", or the GPU its local rank selects (one GPU per rank, local
// rank modulo the visible GPUs: "NVIDIA H100 80GB HBM3 (cuda:0, sm_90, 79.1 GiB)"), which it makes current; for
// a choice this process cannot meet, "none (<why>)".
std::string describe_device(DeviceChoice choice, int local_rank);

}  // namespace ringtrain::train

// Measuring how much backward and an allreduce slow each other down on this placement (scaling::Contention): the
// step profiled again while a second thread allreduces back to back, as GradientSync's thread does beside backward.
// On emulated hosts sharing two vCPUs the MNIST CNN's backward took 2.0-2.6x its time alone beside its allreduce,
// which the link and a one-rank profile cannot see (bench/RESULTS.md, "Contention: backward beside its allreduce").
// The allreduce's time beside is over the whole profile (set-up, forward and optimizer too), backward's its own.
#pragma once

#include <functional>
#include <optional>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/scaling/scaling_model.hpp"
#include "ringtrain/train/step_profile.hpp"

namespace ringtrain::predict {

struct LoadedProfile {
    train::StepProfile profile;  // the step, timed while the allreduces ran
    double alone_s = 0;          // the allreduce's median time with nothing beside it (measured first)
    double during_s = 0;         // its median time while this rank's profile ran
    int allreduces = 0;          // how many ran during this rank's profile
};

// Allreduces `bytes` (float32) `repeats` times alone, then runs `profile` on this thread while a second thread
// allreduces the same message back to back over `comm`, until every rank's profile has returned (each allreduce
// carries the ranks' "done" flags, so all leave the loop after the same one). An exception from `profile` is
// rethrown after the loop ended on every rank. Collective; the communicator is used from the second thread alone
// meanwhile, so `profile` must not use it.
LoadedProfile profile_while_allreducing(comm::Communicator& comm, double bytes, int repeats,
                                        const std::function<train::StepProfile()>& profile);

// The factors from the step alone and under load: backward's time ratio and the allreduce's, each from 1 (a ratio
// below 1 is the noise of the moment, not a speed-up) to 1e6. None without an allreduce during the profile or with a
// time of 0 (clock resolution).
std::optional<scaling::Contention> contention_from(const train::StepProfile& alone, const LoadedProfile& loaded);

// The message the load runs: the step's gradients as one allreduce (the bytes a step sends), kept within the sizes
// --measure times (4 KiB to 16 MiB).
double contention_bytes(const train::StepProfile& profile);

}  // namespace ringtrain::predict

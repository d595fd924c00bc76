// profile_while_allreducing, contention_from, contention_bytes: see the header.
#include "ringtrain/predict/contention_measurement.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/quantiles.hpp"
#include "ringtrain/predict/link_measurement.hpp"

namespace ringtrain::predict {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

LoadedProfile profile_while_allreducing(comm::Communicator& comm, double bytes, int repeats,
                                        const std::function<train::StepProfile()>& profile) {
    if (repeats < 1) throw Error("profile_while_allreducing: needs at least one repeat");
    const size_t floats = std::max<size_t>(2, static_cast<size_t>(bytes / sizeof(float)));
    // Zeros stay zeros under a sum, so the buffer never needs refilling; its last float carries the done flags.
    std::vector<float> buffer(floats, 0.0f);
    const std::span<float> all(buffer);
    LoadedProfile out;
    out.alone_s = median(time_allreduces(comm, all, repeats));

    std::atomic<bool> done{false};
    std::vector<double> during;
    std::exception_ptr comm_error;
    comm.barrier();  // the loads start together
    std::thread load([&] {
        try {
            const float ranks = static_cast<float>(comm.size());
            for (;;) {
                const bool mine_done = done.load(std::memory_order_acquire);
                buffer.back() = mine_done ? 1.0f : 0.0f;
                const auto t0 = std::chrono::steady_clock::now();
                comm.allreduce(all, comm::ReduceOp::Sum);
                if (!mine_done) during.push_back(seconds_since(t0));
                if (buffer.back() >= ranks - 0.5f) break;  // every rank's profile has returned
            }
        } catch (...) {
            comm_error = std::current_exception();
        }
    });
    std::exception_ptr profile_error;
    try {
        out.profile = profile();
    } catch (...) {
        profile_error = std::current_exception();
    }
    done.store(true, std::memory_order_release);
    load.join();
    if (profile_error) std::rethrow_exception(profile_error);
    if (comm_error) std::rethrow_exception(comm_error);
    out.allreduces = static_cast<int>(during.size());
    out.during_s = during.empty() ? 0.0 : median(during);
    return out;
}

std::optional<scaling::Contention> contention_from(const train::StepProfile& alone, const LoadedProfile& loaded) {
    if (loaded.allreduces < 1 || !(loaded.alone_s > 0) || !(alone.backward_s > 0)) return std::nullopt;
    scaling::Contention c;
    // At most 1e6, what a --profile file may hold (contention_from_json).
    c.compute = std::clamp(loaded.profile.backward_s / alone.backward_s, 1.0, 1e6);
    c.communication = std::clamp(loaded.during_s / loaded.alone_s, 1.0, 1e6);
    return c;
}

double contention_bytes(const train::StepProfile& profile) {
    double floats = 0;
    for (const auto& g : profile.gradients) floats += static_cast<double>(g.floats);
    return std::clamp(floats * sizeof(float), 4096.0, 16.0 * 1048576);
}

}  // namespace ringtrain::predict

// ShardedLoader: batches from a Dataset for one rank of a data-parallel job, with a prefetch thread.
// Train mode: the same seeded permutation on every rank each epoch; step s on rank r reads
// perm[(s*world + r)*B, +B), so N ranks x batch B see exactly the samples 1 rank x batch N*B would.
// The last partial global batch is dropped, so every rank runs the same number of steps.
// Eval mode: no shuffle; rank r reads a contiguous 1/world share of the set, the last batch may be short.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>

#include "ringtrain/core/tensor.hpp"
#include "ringtrain/data/dataset.hpp"

namespace ringtrain::data {

struct Batch {
    Tensor x;  // [n, sample_shape...]
    Tensor y;  // [n] labels as floats
    int64_t size() const { return x.ndim() ? x.dim(0) : 0; }
};

enum class LoaderMode { Train, Eval };

struct LoaderOptions {
    int64_t batch_size = 64;  // per rank
    uint64_t seed = 0;
    int rank = 0;
    int world = 1;
    LoaderMode mode = LoaderMode::Train;
    bool prefetch = true;  // fill the next batch on a background thread
};

class ShardedLoader {
public:
    ShardedLoader(const Dataset& dataset, LoaderOptions options);
    ~ShardedLoader();
    ShardedLoader(const ShardedLoader&) = delete;
    ShardedLoader& operator=(const ShardedLoader&) = delete;

    // Steps per epoch for this rank (identical on every rank in Train mode).
    int64_t steps_per_epoch() const;
    // Begins epoch `epoch` at step `first_step` (non-zero when resuming mid-epoch).
    void start_epoch(int64_t epoch, int64_t first_step = 0);
    // Fills `out` with the next batch; false at the end of the epoch. `out` is overwritten, its buffers reused.
    bool next(Batch& out);
    // Seconds the caller spent waiting inside next() since construction (the data-wait phase).
    double wait_seconds() const { return wait_seconds_; }

private:
    void fill(int64_t step, Batch& b) const;
    void worker();
    void stop_worker();

    const Dataset& dataset_;
    LoaderOptions opt_;
    std::vector<int64_t> order_;
    int64_t epoch_ = 0;
    int64_t step_ = 0;
    double wait_seconds_ = 0.0;

    // Prefetch state: the worker fills `ready_` for step `ready_step_`.
    std::thread thread_;
    std::mutex mu_;
    std::condition_variable cv_;
    Batch ready_;
    int64_t ready_step_ = -1;
    int64_t want_step_ = -1;
    bool quit_ = false;
    std::exception_ptr error_;
};

}  // namespace ringtrain::data

// ShardedLoader: batches from a Dataset for one rank of a data-parallel job, with a prefetch thread.
// Train mode: the same seeded permutation on every rank each epoch; step s on rank r reads
// perm[(s*world + r)*B, +B), so N ranks x batch B see exactly the samples 1 rank x batch N*B would. With a split
// (set_split, sync.balance), rank r reads counts[r] samples of the same global window, after ranks 0..r-1's.
// The last partial global batch is dropped, so every rank runs the same number of steps.
// Eval mode: no shuffle; rank r reads a contiguous 1/world share of the set, the last batch may be short.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ringtrain/core/tensor.hpp"
#include "ringtrain/data/dataset.hpp"
#include "ringtrain/data/worker_pool.hpp"

namespace ringtrain::data {

struct Batch {
    Tensor x;  // [n, sample_shape...]
    Tensor y;  // [n] labels as floats
    int64_t size() const { return x.ndim() ? x.dim(0) : 0; }
};

enum class LoaderMode { Train, Eval };

// The seed of sample `index`'s random augmentation in epoch `epoch` of a run seeded with `seed` (Train mode passes it
// to Dataset::read_training): a pure function of the three, so batches are the same with any number of workers or
// ranks, and a resumed run draws what the uninterrupted one would have.
uint64_t augment_draw_key(uint64_t seed, int64_t epoch, int64_t index);

struct LoaderOptions {
    int64_t batch_size = 64;  // per rank
    uint64_t seed = 0;
    int rank = 0;
    int world = 1;
    LoaderMode mode = LoaderMode::Train;
    bool prefetch = true;  // fill the next batch on a background thread (while it pays, see below)
    // Why prefetch is off, for prefetch_note() (default: "data.prefetch false").
    std::string prefetch_off_reason;
    // With prefetch on, after this many prefetched batches the loader compares the caller's mean wait per batch with
    // the worker's mean fill time; when the caller waited at least 3/4 of a fill (prefetch hid a quarter of the work
    // or less, and a thread costs a hand-over per batch besides), it fills on the caller's thread from then on.
    // In-memory IDX batches fill faster than a hand-over between threads costs where waking an idle core is slow
    // (bench/RESULTS.md, "Measurements moved out of code comments"). 0 = never switch.
    int64_t prefetch_probe_batches = 32;
    // Threads that fill one batch together (PyTorch DataLoader's num_workers, for inputs whose decoding or generation
    // a single thread cannot keep up with, e.g. 3x224x224 images feeding a GPU): a WorkerPool that lives as long as
    // the loader. Costly reads (decoding files) are handed out one sample at a time; in-memory samples go in
    // contiguous shares. Batches under ~1 M floats are filled by one thread whatever this says (waking threads would
    // cost more than it saves), unless reads are costly. Dataset::read must be safe to call concurrently (all ours
    // are).
    int workers = 1;
    // Where the batches' host buffers come from, and when one handed out may be written again. A GPU run gives
    // page-locked buffers that its uploader copies from in place, still reading one after the step that got it has
    // queued its work (core/cuda_device.hpp, AsyncUploader): before_refill waits for those copies, and the loader calls
    // it before it writes again into a buffer it has handed out. Unset: plain buffers, rewritten at once.
    std::function<Tensor(Shape)> allocate_host;
    std::function<void()> before_refill;
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
    // next() without a start_epoch() first begins epoch 0 at step 0.
    void start_epoch(int64_t epoch, int64_t first_step = 0);
    // Train mode: from step `first_step` of this epoch on (and in later epochs), rank r reads counts[r] samples of
    // each step's global window of world x batch_size, the ranks' shares in rank order. `counts` has one entry per
    // rank, each at least 1, summing to world x batch_size (else Error). `first_step` must be past every step already
    // returned or handed to the prefetch thread: step() + 1 always is.
    void set_split(int64_t first_step, std::vector<int64_t> counts);

    // Fills `out` with the next batch; false at the end of the epoch. `out` is overwritten, its buffers reused.
    // With prefetch on, the buffers `out` held before the call go to the prefetch thread, which overwrites
    // them with the batch after this one: do not keep views of a batch across the next call.
    // An exception thrown while reading a batch (here or on the prefetch thread) is rethrown here; the same
    // step is read again if next() is called again.
    bool next(Batch& out);
    // Seconds the caller spent waiting inside next() since construction (the data-wait phase).
    double wait_seconds() const { return wait_seconds_; }
    // Whether batches still come from the prefetch thread, and, for the run summary, what the probe decided
    // ("on", "off (data.prefetch false)", or "off after 32 batches: waited 0.150 ms per batch, a fill takes 0.060 ms").
    bool prefetching() const { return opt_.prefetch && prefetch_active_; }
    std::string prefetch_note() const;

    // Position, for checkpoints and logs: the current epoch and the step the next call to next() returns.
    int64_t epoch() const { return epoch_; }
    int64_t step() const { return step_; }
    // Samples this rank reads per epoch (steps x batch in Train mode; its share of the set in Eval mode).
    int64_t samples_per_epoch() const;
    const Dataset& dataset() const { return dataset_; }
    const LoaderOptions& options() const { return opt_; }

private:
    struct Share {
        int64_t first = 0, count = 0;  // Train mode: offsets into order_
    };
    Share share_of(int64_t step) const;  // the split in force at `step` (mu_ held where a worker runs)
    void fill(int64_t step, const Share& split, Batch& b) const;
    void worker();
    void stop_worker();
    void request(int64_t step);  // asks the worker for `step` (mu_ held)
    void make_order();            // the permutation for epoch_ (Train mode)
    int64_t eval_begin(int rank) const;

    const Dataset& dataset_;
    LoaderOptions opt_;
    Shape sample_shape_;
    int64_t sample_numel_ = 0;
    int64_t steps_ = 0;
    std::vector<int64_t> order_;  // Train mode: this epoch's permutation of [0, N)
    // set_split's splits by first step, in step order; empty = the even split. Under mu_ (read by the worker).
    std::vector<std::pair<int64_t, std::vector<int64_t>>> splits_;
    bool started_ = false;
    int64_t epoch_ = 0;
    int64_t step_ = 0;
    double wait_seconds_ = 0.0;
    bool prefetch_active_ = true;      // caller's thread only
    int64_t probe_batches_ = 0;        // prefetched batches measured so far (caller's thread only)
    double probe_wait_s_ = 0.0;
    std::string prefetch_note_;
    double fill_seconds_ = 0.0;        // worker's time filling batches (under mu_)
    int64_t fills_ = 0;                // (under mu_)

    // Prefetch state (under mu_): the worker fills `ready_` for step `want_step_`, then sets `ready_step_`.
    // `order_` is only changed while the worker is idle (no request pending, not busy).
    std::unique_ptr<WorkerPool> pool_;  // data.workers > 1; used by fill() on one thread at a time
    std::thread thread_;
    std::mutex mu_;
    std::condition_variable cv_;
    Batch ready_;
    int64_t ready_step_ = -1;
    int64_t want_step_ = -1;
    bool busy_ = false;
    bool quit_ = false;
    std::exception_ptr error_;
    int64_t error_step_ = -1;
};

}  // namespace ringtrain::data

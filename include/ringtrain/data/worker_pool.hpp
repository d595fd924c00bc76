// WorkerPool: the threads that fill one batch together (data.workers, PyTorch DataLoader's num_workers). They live
// as long as the pool, so what a thread keeps from sample to sample (the image decoder's thread_local buffers)
// survives from batch to batch, and no thread is started per batch. Items are handed out one at a time from a
// shared counter (the loader's items are files, or contiguous shares of in-memory samples), so a slow file delays
// only itself, not a share behind it. The caller's thread takes part in every loop. bench/RESULTS.md, "The image
// loader's worker threads", has the measurements.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ringtrain::data {

class WorkerPool {
public:
    // `threads` counts the caller: threads - 1 helper threads are started (none for threads <= 1). Throws
    // std::system_error when a thread cannot be started (those already started are stopped first).
    explicit WorkerPool(int threads);
    // Must not run while a run() is in progress on another thread.
    ~WorkerPool();
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    int threads() const { return static_cast<int>(helpers_.size()) + 1; }
    // Calls fn(i) once for every i in [0, n), on at most `max_threads` threads (the caller's included, at most
    // threads(); below 1 counts as 1), and returns when every call has returned. If calls threw, the exception of
    // the lowest such i is rethrown (which one does not depend on the timing) after all calls finished. One loop at
    // a time: concurrent callers are served one after the other. Not re-entrant: fn must not call run().
    void run(int64_t n, int max_threads, const std::function<void(int64_t)>& fn);

private:
    void helper(int id);
    void stop();  // ends and joins the helpers
    void work();  // takes items of the current loop until none is left

    std::vector<std::thread> helpers_;
    std::mutex run_mu_;  // one loop at a time
    std::mutex mu_;
    std::condition_variable start_cv_, done_cv_;
    uint64_t generation_ = 0;  // a new loop was posted (under mu_)
    bool quit_ = false;
    // The current loop (set under mu_ before generation_ moves; read by the threads taking part).
    const std::function<void(int64_t)>* fn_ = nullptr;
    int64_t n_ = 0;
    int helpers_wanted_ = 0;   // helpers with id < this take part
    int helpers_running_ = 0;  // of those, still inside the loop (under mu_)
    std::atomic<int64_t> next_{0};  // the next item to hand out
    int64_t error_index_ = -1;      // the lowest item that threw, and its exception (under mu_)
    std::exception_ptr error_;
};

}  // namespace ringtrain::data

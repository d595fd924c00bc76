#include "ringtrain/data/worker_pool.hpp"

#include <algorithm>
#include <utility>

namespace ringtrain::data {

WorkerPool::WorkerPool(int threads) {
    const int helpers = std::max(threads, 1) - 1;
    helpers_.reserve(static_cast<size_t>(helpers));
    try {
        for (int id = 0; id < helpers; ++id) helpers_.emplace_back([this, id] { helper(id); });
    } catch (...) {  // no more threads (a process or cgroup limit): stop those started, then report
        stop();
        throw;
    }
}

WorkerPool::~WorkerPool() { stop(); }

void WorkerPool::stop() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        quit_ = true;
    }
    start_cv_.notify_all();
    for (auto& t : helpers_) t.join();
    helpers_.clear();
}

void WorkerPool::work() {
    for (;;) {
        const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
        if (i >= n_) return;
        try {
            (*fn_)(i);
        } catch (...) {
            std::lock_guard<std::mutex> lk(mu_);
            if (error_index_ < 0 || i < error_index_) {
                error_index_ = i;
                error_ = std::current_exception();
            }
        }
    }
}

void WorkerPool::helper(int id) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
        start_cv_.wait(lk, [&] { return quit_ || generation_ != seen; });
        if (quit_) return;
        seen = generation_;
        if (id >= helpers_wanted_) continue;
        lk.unlock();
        work();
        lk.lock();
        if (--helpers_running_ == 0) done_cv_.notify_one();
    }
}

void WorkerPool::run(int64_t n, int max_threads, const std::function<void(int64_t)>& fn) {
    if (n <= 0) return;
    std::lock_guard<std::mutex> serial(run_mu_);
    const int helpers = static_cast<int>(std::clamp<int64_t>(
        std::min<int64_t>(max_threads, n) - 1, 0, static_cast<int64_t>(helpers_.size())));
    {
        std::lock_guard<std::mutex> lk(mu_);
        fn_ = &fn;
        n_ = n;
        next_.store(0, std::memory_order_relaxed);
        error_index_ = -1;
        error_ = nullptr;
        helpers_wanted_ = helpers;
        helpers_running_ = helpers;
        ++generation_;
    }
    if (helpers > 0) start_cv_.notify_all();
    work();
    std::exception_ptr error;
    {
        std::unique_lock<std::mutex> lk(mu_);
        done_cv_.wait(lk, [this] { return helpers_running_ == 0; });
        fn_ = nullptr;
        error = std::exchange(error_, nullptr);
    }
    if (error) std::rethrow_exception(error);
}

}  // namespace ringtrain::data

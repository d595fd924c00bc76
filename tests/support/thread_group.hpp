// "Ranks" as threads of one process, for the synchronised BatchNorm tests (nn layers and the ops on either device):
// ThreadSum is an allreduce(Sum) of doubles among n threads, on_threads runs one function per "rank" at once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

namespace rt_test {

// Each member's sum() blocks until all n have contributed, then every member gets the total, added in rank order
// (so every member sees the same bits, as the real communicators give). Members that passed different lengths all
// throw (none is left waiting).
class ThreadSum {
public:
    explicit ThreadSum(int n) : n_(n), parts_(static_cast<size_t>(n)), calls_(static_cast<size_t>(n), 0) {}

    void sum(int rank, std::span<double> v) {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return !draining_; });  // the previous round must be handed out first
        const int64_t round = rounds_;
        parts_[static_cast<size_t>(rank)] = v;
        ++calls_[static_cast<size_t>(rank)];
        if (++arrived_ == n_) {
            mismatch_ = false;
            total_.assign(v.size(), 0.0);
            for (const auto& p : parts_) {
                if (p.size() != v.size()) mismatch_ = true;
                for (size_t i = 0; i < p.size() && i < total_.size(); ++i) total_[i] += p[i];
            }
            draining_ = true;
            cv_.notify_all();
        } else {
            cv_.wait(lock, [&] { return draining_ && rounds_ == round; });
        }
        const bool mismatch = mismatch_;
        if (!mismatch) std::copy(total_.begin(), total_.end(), v.begin());
        if (++left_ == n_) {
            arrived_ = left_ = 0;
            draining_ = false;
            ++rounds_;
            cv_.notify_all();
        }
        if (mismatch) throw std::logic_error("ranks passed different lengths");  // not REQUIRE: a worker thread
    }
    // sum() for one rank, as an ops::CrossRankSum.
    std::function<void(std::span<double>)> member(int rank) {
        return [this, rank](std::span<double> v) { sum(rank, v); };
    }
    int64_t rounds() const { return rounds_; }
    int calls(int rank) const { return calls_[static_cast<size_t>(rank)]; }  // each rank's sum() calls so far

private:
    const int n_;
    std::vector<std::span<double>> parts_;
    std::vector<int> calls_;
    std::vector<double> total_;
    std::mutex mutex_;
    std::condition_variable cv_;
    int arrived_ = 0, left_ = 0;
    bool draining_ = false, mismatch_ = false;
    int64_t rounds_ = 0;
};

// Runs f(rank) on n threads at once and rethrows the first exception.
inline void on_threads(int n, const std::function<void(int)>& f) {
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            try {
                f(r);
            } catch (...) {
                errors[static_cast<size_t>(r)] = std::current_exception();
            }
        });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
}

}  // namespace rt_test

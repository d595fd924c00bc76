// WorkerPool: every item exactly once at awkward sizes and thread counts, the lowest failing item's exception,
// threads that outlive a loop (what keeps the decoders' thread_local buffers), and items handed out by speed.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ringtrain/data/worker_pool.hpp"

using ringtrain::data::WorkerPool;

TEST_CASE("WorkerPool calls every item exactly once", "[data][workers]") {
    for (int threads : {1, 2, 3, 5}) {
        WorkerPool pool(threads);
        CHECK(pool.threads() == threads);
        for (int64_t n : {0, 1, 2, 7, 64, 1000}) {
            for (int max_threads : {1, 2, threads, threads + 4}) {
                std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
                pool.run(n, max_threads, [&](int64_t i) { calls[static_cast<size_t>(i)].fetch_add(1); });
                for (int64_t i = 0; i < n; ++i) {
                    INFO("threads " << threads << ", n " << n << ", max " << max_threads << ", item " << i);
                    REQUIRE(calls[static_cast<size_t>(i)].load() == 1);
                }
            }
        }
    }
}

TEST_CASE("WorkerPool rethrows the lowest failing item's exception and stays usable", "[data][workers]") {
    WorkerPool pool(4);
    for (int round = 0; round < 20; ++round) {
        std::atomic<int> done{0};
        try {
            pool.run(100, 4, [&](int64_t i) {
                done.fetch_add(1);
                if (i == 37 || i == 91 || i == 62) throw std::runtime_error("item " + std::to_string(i));
            });
            FAIL("run() returned normally");
        } catch (const std::runtime_error& e) {
            CHECK(std::string(e.what()) == "item 37");
        }
        CHECK(done.load() == 100);  // the other items still ran: the error is reported after the loop
    }
    std::atomic<int64_t> sum{0};
    pool.run(10, 4, [&](int64_t i) { sum.fetch_add(i); });
    CHECK(sum.load() == 45);
}

namespace {

// Counts the threads that ever touched it: a thread_local object is built once per thread (a thread id could be
// reused by a new thread, its first use could not).
std::atomic<int> g_threads_seen{0};
struct ThreadMarker {
    ThreadMarker() { g_threads_seen.fetch_add(1); }
    void touch() {}
};
thread_local ThreadMarker t_marker;

}  // namespace

TEST_CASE("WorkerPool keeps the same threads from loop to loop", "[data][workers]") {
    WorkerPool pool(3);
    const int before = g_threads_seen.load();
    std::atomic<int> helpers_took_part{0};
    const auto caller = std::this_thread::get_id();
    for (int loop = 0; loop < 50; ++loop)
        pool.run(30, 3, [&](int64_t) {
            t_marker.touch();
            std::this_thread::sleep_for(std::chrono::microseconds(50));
            if (std::this_thread::get_id() != caller) helpers_took_part.fetch_add(1);
        });
    // Threads started per loop (and their thread_local decode buffers) would count up to 2 new threads a loop.
    CHECK(g_threads_seen.load() - before <= 3);
    CHECK(helpers_took_part.load() > 0);
}

TEST_CASE("WorkerPool hands items to whichever thread is free", "[data][workers]") {
    // Item 0 is slow; with contiguous halves its thread would also get items 1..49. Handed out one at a time, the
    // other thread takes (nearly) all of the rest while item 0 runs.
    WorkerPool pool(2);
    std::mutex mu;
    std::thread::id slow_thread;
    int on_slow_thread = 0;
    pool.run(100, 2, [&](int64_t i) {
        if (i == 0) {
            {
                std::lock_guard<std::mutex> lk(mu);
                slow_thread = std::this_thread::get_id();
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            return;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        std::lock_guard<std::mutex> lk(mu);
        if (std::this_thread::get_id() == slow_thread) ++on_slow_thread;
    });
    CHECK(on_slow_thread < 25);
}

// SharedMemoryAllreduce: the segment's layout and the two-barrier chunk schedule.
//
// Segment layout (a SharedSegment): N arrival counters, one per 128-byte line (two cache lines: no false sharing with
// the adjacent-line prefetcher), then buffer 0's N slots, then buffer 1's N slots, each slot chunk_bytes rounded up to
// 4 KiB.
#include "ringtrain/comm/shared_memory_allreduce.hpp"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/core/cpu_relax.hpp"
#include "ringtrain/core/error.hpp"
#include "reduce_kernels.hpp"

namespace ringtrain::comm {

namespace {

constexpr size_t kCounterStride = 128;
// Polls with a pause before yielding the core: long enough to catch a peer that is a few microseconds behind,
// short enough not to burn a time slice that a descheduled peer needs when ranks outnumber cores.
constexpr int kSpinsBeforeYield = 200;
// sched_yield only lets tasks on this CPU's run queue go first; a peer queued on another CPU behind a busy task (more
// ranks than cores, other jobs) needs us off the CPU. After yielding this long we sleep between polls: long enough
// that a rank waiting for an ordinary straggler (a few hundred µs on the development VM; bench/RESULTS.md,
// "Measurements moved out of code comments") never pays a sleep's wake-up latency.
constexpr auto kYieldFor = std::chrono::milliseconds(1);
// Two slots per rank of this each: beyond it the slots stop fitting in any cache and /dev/shm may be small.
constexpr size_t kMaxChunkBytes = size_t{64} << 20;

static_assert(std::atomic<uint64_t>::is_always_lock_free, "the arrival counters must be lock-free to work across processes");

void nap() {
    const timespec t{0, 20'000};  // 20 µs asked; the kernel's timer slack makes it longer (see kYieldFor)
    nanosleep(&t, nullptr);
}

void wait_until(const std::atomic<uint64_t>& flag, uint64_t epoch) {
    for (int i = 0; i < kSpinsBeforeYield; ++i) {
        if (flag.load(std::memory_order_acquire) >= epoch) return;
        cpu_relax();
    }
    const auto start = std::chrono::steady_clock::now();
    bool sleep = false;
    for (unsigned i = 0; flag.load(std::memory_order_acquire) < epoch; ++i) {
        if (sleep) {
            nap();
        } else {
            sched_yield();
            if (i % 16 == 15 && std::chrono::steady_clock::now() - start > kYieldFor) sleep = true;
        }
    }
}

// Segment j of a chunk of `len` elements cut into n: [off, off + len_j).
inline size_t seg_off(size_t len, size_t n, size_t j) { return j * (len / n) + std::min(j, len % n); }
inline size_t seg_len(size_t len, size_t n, size_t j) { return len / n + (j < len % n ? 1 : 0); }

}  // namespace

std::unique_ptr<SharedMemoryAllreduce> SharedMemoryAllreduce::create(MPI_Comm node, size_t chunk_bytes, std::string* why) {
    if (chunk_bytes > kMaxChunkBytes) {  // the same argument on every rank: every rank returns here
        if (why)
            *why = "shared-memory chunk of " + std::to_string(chunk_bytes) + " bytes is larger than the " +
                   std::to_string(kMaxChunkBytes >> 20) + " MiB allowed";
        return nullptr;
    }
    int size = 1;
    check_mpi(MPI_Comm_size(node, &size), "MPI_Comm_size");
    const size_t chunk_elems = std::max<size_t>(chunk_bytes / sizeof(float), 1);
    const size_t slot_bytes = (chunk_elems * sizeof(float) + 4095) / 4096 * 4096;
    const size_t n = static_cast<size_t>(size);
    std::unique_ptr<SharedSegment> segment = SharedSegment::create(node, n * kCounterStride + 2 * n * slot_bytes, why);
    if (!segment) return nullptr;
    return std::unique_ptr<SharedMemoryAllreduce>(new SharedMemoryAllreduce(std::move(segment), chunk_elems, slot_bytes));
}

SharedMemoryAllreduce::SharedMemoryAllreduce(std::unique_ptr<SharedSegment> segment, size_t chunk_elems,
                                             size_t slot_bytes)
    : segment_(std::move(segment)), base_(segment_->base()), rank_(segment_->rank()), size_(segment_->size()),
      chunk_elems_(chunk_elems), slot_bytes_(slot_bytes) {}

SharedMemoryAllreduce::~SharedMemoryAllreduce() = default;

std::atomic<uint64_t>& SharedMemoryAllreduce::arrived(int r) const {
    // The segment starts zero-filled, which is a valid std::atomic<uint64_t> holding 0 (lock-free, address-free).
    return *reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base_) + static_cast<size_t>(r) * kCounterStride);
}

void* SharedMemoryAllreduce::slot(int buffer, int r) const {
    const size_t n = static_cast<size_t>(size_);
    return static_cast<char*>(base_) + n * kCounterStride +
           (static_cast<size_t>(buffer) * n + static_cast<size_t>(r)) * slot_bytes_;
}

void SharedMemoryAllreduce::barrier(const std::function<bool()>* idle) {
    const uint64_t epoch = ++epoch_;
    arrived(rank_).store(epoch, std::memory_order_release);  // publishes our writes to the slots
    waiting_for_epoch_.store(epoch, std::memory_order_relaxed);
    struct Done {  // also when idle work throws (a parse error): the watchdog must not name peers for a wait that ended
        std::atomic<uint64_t>& w;
        ~Done() { w.store(0, std::memory_order_relaxed); }
    } done{waiting_for_epoch_};
    if (idle && *idle) {
        // The caller's work between checks, while it has any: a rank ahead of its peers works instead of spinning.
        for (int r = 0; r < size_;) {
            if (r == rank_ || arrived(r).load(std::memory_order_acquire) >= epoch) {
                ++r;
                continue;
            }
            if (!(*idle)()) break;
        }
    }
    for (int r = 0; r < size_; ++r)
        if (r != rank_) wait_until(arrived(r), epoch);
}

std::vector<int> SharedMemoryAllreduce::late_ranks() const {
    std::vector<int> late;
    const uint64_t epoch = waiting_for_epoch_.load(std::memory_order_relaxed);
    if (epoch == 0) return late;
    for (int r = 0; r < size_; ++r)
        if (r != rank_ && arrived(r).load(std::memory_order_acquire) < epoch) late.push_back(r);
    return late;
}

void SharedMemoryAllreduce::allreduce(float* data, size_t count, ReduceOp op, WireFormat wire, uint64_t& sent,
                                      uint64_t& received) {
    const bool k16 = wire != WireFormat::Float32;
    const size_t esize = wire_element_size(wire);
    const size_t n = static_cast<size_t>(size_), me = static_cast<size_t>(rank_);
    const float inv_n = 1.0f / static_cast<float>(size_);
    for (size_t chunk_off = 0; chunk_off < count; chunk_off += chunk_elems_) {
        const size_t len = std::min(chunk_elems_, count - chunk_off);
        const int buf = static_cast<int>(chunks_done_++ % 2);
        float* const in = data + chunk_off;
        const size_t off = seg_off(len, n, me), mine = seg_len(len, n, me);
        // 1. Our contribution to the other ranks' segments into our slot (our own segment never leaves our buffer).
        for (size_t j = 0; j < n; ++j) {
            const size_t o = seg_off(len, n, j), l = seg_len(len, n, j);
            if (j == me || l == 0) continue;
            if (k16) encode16(wire, in + o, static_cast<uint16_t*>(slot(buf, rank_)) + o, l);
            else std::memcpy(static_cast<float*>(slot(buf, rank_)) + o, in + o, l * sizeof(float));
        }
        barrier();
        // 2. Finish our segment in our buffer: ours, then the next ranks' in order (r+1, r+2, ...), then publish it in
        // our slot. The 16-bit formats sum in float32, scale an Average, and keep the 16-bit rounding of the result.
        if (mine > 0) {
            float* acc = in + off;
            for (size_t k = 1; k < n; ++k) {
                const int r = static_cast<int>((me + k) % n);
                if (k16) decode16_reduce(wire, static_cast<const uint16_t*>(slot(buf, r)) + off, acc, mine, op);
                else detail::reduce_into(acc, static_cast<const float*>(slot(buf, r)) + off, mine, op);
            }
            if (k16) {
                if (op == ReduceOp::Average) detail::scale(acc, mine, inv_n);
                round_to_16(wire, acc, static_cast<uint16_t*>(slot(buf, rank_)) + off, mine);  // leaves the encoding there
            } else {
                std::memcpy(static_cast<float*>(slot(buf, rank_)) + off, acc, mine * sizeof(float));
            }
        }
        barrier();
        // 3. The other ranks' finished segments out of their slots.
        for (size_t j = 0; j < n; ++j) {
            const size_t o = seg_off(len, n, j), l = seg_len(len, n, j);
            if (j == me || l == 0) continue;
            if (k16) decode16(wire, static_cast<const uint16_t*>(slot(buf, static_cast<int>(j))) + o, in + o, l);
            else std::memcpy(in + o, static_cast<const float*>(slot(buf, static_cast<int>(j))) + o, l * sizeof(float));
        }
        // Peers read (len − mine) of our contribution and our `mine` finished values, (N−1) times; we read as much.
        const uint64_t moved = static_cast<uint64_t>((len - mine) + (n - 1) * mine) * esize;
        sent += moved;
        received += moved;
    }
}

void SharedMemoryAllreduce::allgatherv(const float* mine, std::span<const size_t> counts, float* out,
                                       const std::function<bool()>& idle, uint64_t& sent, uint64_t& received) {
    const size_t n = static_cast<size_t>(size_), me = static_cast<size_t>(rank_);
    size_t longest = 0;
    for (size_t c : counts) longest = std::max(longest, c);
    // Where each rank's part starts in out.
    std::vector<size_t>& at = part_starts_;
    at.assign(n, 0);
    for (size_t r = 1; r < n; ++r) at[r] = at[r - 1] + counts[r - 1];
    if (counts[me] > 0)  // our part never goes through the segment (a rank with none may pass no pointer at all)
        std::memcpy(out + at[me], mine, counts[me] * sizeof(float));
    // Rounds: piece k of every rank is its floats [k·chunk, (k+1)·chunk).
    for (size_t off = 0; off < longest; off += chunk_elems_) {
        const int buf = static_cast<int>(chunks_done_++ % 2);
        const size_t piece = counts[me] > off ? std::min(chunk_elems_, counts[me] - off) : 0;
        if (piece > 0) std::memcpy(slot(buf, rank_), mine + off, piece * sizeof(float));
        barrier(&idle);
        for (size_t r = 0; r < n; ++r) {
            if (r == me || counts[r] <= off) continue;
            const size_t l = std::min(chunk_elems_, counts[r] - off);
            std::memcpy(out + at[r] + off, slot(buf, static_cast<int>(r)), l * sizeof(float));
            received += l * sizeof(float);
        }
        sent += (n - 1) * piece * sizeof(float);
    }
}

void SharedMemoryAllreduce::allreduce_small(double* data, size_t count, ReduceOp op, const std::function<bool()>& idle,
                                            uint64_t& sent, uint64_t& received) {
    if (count > max_small_doubles())
        throw Error("shared-memory allreduce of " + std::to_string(count) + " doubles: at most " +
                    std::to_string(max_small_doubles()) + " fit a slot");
    if (op == ReduceOp::Average) throw Error("shared-memory allreduce_small: the caller scales an Average");
    const int buf = static_cast<int>(chunks_done_++ % 2);
    std::memcpy(slot(buf, rank_), data, count * sizeof(double));
    barrier(&idle);
    // Rank order from slot 0, on every rank (our own values included), so every rank forms the same bits.
    std::memcpy(data, slot(buf, 0), count * sizeof(double));
    for (int r = 1; r < size_; ++r) {
        const auto* v = static_cast<const double*>(slot(buf, r));
        for (size_t i = 0; i < count; ++i) {
            switch (op) {
                case ReduceOp::Max: data[i] = std::max(data[i], v[i]); break;
                case ReduceOp::Min: data[i] = std::min(data[i], v[i]); break;
                default: data[i] += v[i]; break;
            }
        }
    }
    const uint64_t moved = static_cast<uint64_t>(size_ - 1) * count * sizeof(double);
    sent += moved;
    received += moved;
}

}  // namespace ringtrain::comm

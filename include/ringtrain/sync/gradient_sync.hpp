// GradientSync: averages every parameter gradient across ranks after backward, Horovod style.
//
// Buckets. The gradients are grouped into fusion buckets in the order backward reports them (the reverse of the
// parameter list: last layer first), each bucket up to `fusion_bytes` (a tensor larger than that gets a bucket of its
// own; fusion_bytes = 0 gives one bucket per tensor). Each bucket owns a slot in one preallocated buffer.
// With cycle_time_ms = 0 that size rule is the whole layout, fixed at construction. With cycle_time_ms > 0 and
// overlap on (Horovod's cycle time), the first step runs blocking with the size layout while every rank notes when
// each gradient became ready; at the end of that step rank 0's times decide the final layout, broadcast to all:
// a bucket is also closed when the next gradient became ready more than cycle_time_ms after the bucket's first one,
// provided it already holds min_bucket_bytes (DDP's 1 MiB first bucket, for the same reason: a smaller allreduce is
// latency, not bandwidth, and a communication thread to hide it costs more CPU than it saves; measured on LeNet-5 at
// 2 ranks on 2 cores: 3 buckets of 231 KB, 9.4 KB and 0.6 KB gave 0.78 scaling efficiency, one bucket 0.90).
// So gradients that backward produces together travel together, and a slow layer's backward (a convolution) is
// overlapped with the allreduce of the layers after it, instead of the whole model waiting for one 64 MiB bucket.
// After that step the layout never changes; it is the same on every rank because only rank 0's timing counts.
//
// One step:
//   begin_step(s)            optional; names the step in stall warnings and the timeline (else a counter is used)
//   on_gradient_ready(p)...  from the backward hook: copies p.grad into its bucket slot; when the bucket's last tensor
//                            arrives the bucket is handed to the communication thread (overlap) for allreduce(Average)
//   synchronize()            hands over anything not yet handed over, waits for every bucket, copies the averages
//                            back into each p.grad. Rethrows an error of the communication thread.
// Buckets are reduced strictly in bucket order (bucket b+1 waits for bucket b even if it filled first), so every rank
// issues the same collectives in the same order whatever order on_gradient_ready calls came in.
// Parameters not reported by on_gradient_ready in a step (a frozen layer, a hook not wired, gradient accumulation
// passes that report nothing) are packed by synchronize() itself from p.grad, bucket by bucket in the same static
// order, so every rank still issues exactly the same collectives; reporting is an optimisation (overlap), never
// needed for correctness. Reporting a parameter twice in one step, or one not in the list, is an Error.
//
// With a single bucket (a model smaller than fusion_bytes) there is nothing to overlap: the bucket is reduced on the
// calling thread as with overlap = false, and overlapping() says so.
// overlap = false: nothing runs behind the caller's back; synchronize() reduces the buckets one by one on the
// calling thread (the same arithmetic and bucket layout, so bitwise the same result as overlap = true).
// A world of size 1 skips all of this: on_gradient_ready and synchronize return at once, gradients are untouched
// (unless reduce_single_rank asks for the collectives anyway, for tests and for measuring their overhead).
//
// Threads and communicators. The overlapping constructor takes a communicator of its own (made by the caller,
// collectively, with comm::make_communicator on every rank at the same point) that only the communication thread
// uses; the caller keeps using its own communicator on its thread (needs MPI_THREAD_MULTIPLE; with a lower thread
// level the object falls back to overlap = false, still on its own communicator, and says so once on stderr).
//
// Stall detection. While a bucket's collective is in flight, a watchdog thread checks its age: after
// stall_warning_s it prints once, on that rank (it polls at a tenth of the shorter threshold, 1 ms to 1 s):
//   ringtrain: rank R: warning: allreduce of bucket B (X MiB, step S) has not completed after T s; a rank may be
//   stuck or dead
// and after stall_abort_s (> 0) it calls comm.abort(message, 1), which takes the whole job down (MPI_Abort).
// Applies to overlap on and off. 0 (or less) switches the warning / the abort off.
//
// Destruction stops the communication thread after the collective it is running (it starts no new ones) and joins it.
//
// Device path (NCCL). When the communicator is a comm::NcclCommunicator (CUDA builds only) and every gradient lives on
// the GPU, nothing goes through host memory and the host never waits for a collective within a step:
//   on_gradient_ready(p)  enqueues a device-to-device copy of p.grad into its slot of a device arena on the default
//                         stream (where backward's kernels run). When a bucket is complete, and every bucket before
//                         it has been handed over (so every rank still issues the collectives in bucket order), it
//                         records an event on the default stream, makes the NCCL stream wait for it and enqueues the
//                         bucket's allreduce there: float32 in place with ncclAvg; Float16/BFloat16 as a kernel that
//                         scales by 1/size and rounds to 16 bits (nearest even) into a 2-byte device buffer,
//                         ncclAllReduce(ncclSum) on that, and a kernel converting back into the float32 arena.
//                         Events recorded on the NCCL stream before and after that mark the bucket started / done.
//   synchronize()         enqueues what backward did not report (in bucket order), makes the default stream wait for
//                         every bucket's done event (a wait on the GPU, not on the host) and enqueues the copies back
//                         into each p.grad, so the optimizer's kernels issued after it see the averages, in stream
//                         order. Then the host waits until the previous step's collectives have completed (polling
//                         their done events, with the stall warning and abort described above; that wait is
//                         blocked_s): the host never runs more than one step ahead of the collectives. A bucket's
//                         time is the GPU time between its two events, read in that poll, so a step's per-bucket time
//                         appears in stats() after the next step's synchronize().
// The collectives run on the NCCL stream concurrently with the backward kernels queued after them on the default
// stream, so overlapping() is true with more than one bucket (and overlap on); there is no communication thread and no
// watchdog thread on this path. The layout is always the size layout (cycle_time_ms is ignored): on_gradient_ready
// times are host enqueue times, which say nothing about when the GPU computes a gradient. The stall age counts from
// when the bucket was enqueued (host time). overlap = false enqueues every bucket in synchronize() instead (bitwise the
// same result). The timeline gets the "pack", "unpack" and "wait" spans; the collectives run on the GPU, not as host
// spans.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/nn/layer.hpp"

namespace ringtrain::telemetry {
class Timeline;
}

namespace ringtrain::sync {

struct SyncOptions {
    size_t fusion_bytes = 64u << 20;  // bucket size cap in bytes of float32 gradients; 0 = one allreduce per tensor
    bool overlap = true;              // allreduce on a communication thread while backward goes on
    comm::WireFormat wire = comm::WireFormat::Float32;  // Float16 / BFloat16: half the traffic, 16-bit rounding
    double stall_warning_s = 60;      // warn once per stalled collective after this long (<= 0: never)
    double stall_abort_s = 0;         // abort the job after this long (<= 0: never)
    double cycle_time_ms = 0;         // > 0 (with overlap): also split buckets by first-step ready times, see above
    size_t min_bucket_bytes = 1u << 20;  // a time gap closes a bucket only once it holds this much
    bool reduce_single_rank = false;  // run the collectives even on one rank: for tests and for measuring the overhead
};

struct BucketStat {
    uint64_t bytes = 0;    // float32 payload of the bucket (what the allreduce averages), bytes
    uint64_t tensors = 0;  // gradients in the bucket
    uint64_t calls = 0;    // allreduces run
    double total_s = 0;    // their summed wall time (from the start of each collective to its end on this rank;
                           // on the device path GPU time between events, added one step late, see above)
    // Achieved bus bandwidth in decimal GB/s, nccl-tests convention: algbw = bytes / (total_s / calls),
    // busbw = algbw · 2(n−1)/n. 0 when nothing was measured or world_size < 2.
    double busbw_gbs(int world_size) const;
};

struct SyncStats {
    double blocked_s = 0;      // time synchronize() spent waiting for communication (the part overlap did not hide);
                               // with overlap off, the time of the collectives themselves; on the device path,
                               // the host's wait for the previous step's collectives (see above)
    uint64_t collectives = 0;  // allreduces issued
    uint64_t steps = 0;        // synchronize() calls
    std::vector<BucketStat> buckets;
};

class GradientSync {
public:
    // Compatibility constructor (the first version's): blocking, on the calling thread, over `comm` (borrowed; the
    // caller keeps using it on the same thread), everything in one bucket, float32, default stall warning.
    GradientSync(comm::Communicator& comm, std::vector<nn::Parameter*> params);
    // `comm` is dedicated to this object (see above); `timeline` (optional, may be null or disabled) receives the
    // spans "pack", "allreduce bucket <b>", "unpack" and "wait". Throws Error for an empty/duplicated parameter.
    GradientSync(std::unique_ptr<comm::Communicator> comm, std::vector<nn::Parameter*> params, SyncOptions options,
                 telemetry::Timeline* timeline = nullptr);
    ~GradientSync();
    GradientSync(const GradientSync&) = delete;
    GradientSync& operator=(const GradientSync&) = delete;

    void begin_step(int64_t step);
    // Called by backward as each gradient becomes final (last layer first).
    void on_gradient_ready(nn::Parameter& p);
    // Replaces every gradient with its average over all ranks. Collective (every rank must call it each step).
    void synchronize();

    SyncStats stats() const;
    const SyncOptions& options() const { return options_; }
    // True when buckets really are reduced on the communication thread (device path: on the NCCL stream while the
    // default stream goes on with backward).
    bool overlapping() const { return overlap_; }
    // True when the device path (NCCL stream, device arena) is in use, see above.
    bool on_device() const { return dev_ != nullptr; }
    // The communicator the collectives run on (for its byte counters: bytes_sent()/bytes_received()).
    comm::Communicator& communicator() { return *comm_; }
    const comm::Communicator& communicator() const { return *comm_; }

    // Bucket layout, for tests and logs: bucket b holds these parameter indices (into the constructor's list), in
    // order, packed contiguously.
    size_t bucket_count() const { return buckets_.size(); }
    std::vector<size_t> bucket_params(size_t b) const;

private:
    enum class State { Filling, Queued, Running, Done };
    struct Slot {
        size_t param;  // index in params_
        size_t offset;  // in arena_
        size_t count;
    };
    struct Bucket {
        std::vector<Slot> slots;
        size_t offset = 0, count = 0;  // region of arena_
        size_t remaining = 0;          // tensors still to arrive this step (caller's thread only)
        State state = State::Filling;  // guarded by mutex_
        int64_t step = 0;              // guarded by mutex_
    };

    void init(std::vector<nn::Parameter*> params);
    // A layout is the number of tensors in each bucket, buckets in backward order.
    // By size alone, or also by ready_s_ (every parameter reported) with the cycle-time rule.
    std::vector<size_t> layout(bool by_time) const;
    void apply_layout(const std::vector<size_t>& tensors_per_bucket);
    void relayout_from_first_step(bool all_reported);  // collective
    void start_overlap_if_useful();
    void pack_missing(size_t b);
    void hand_over_locked(size_t b);
    void reduce_bucket(size_t b);  // runs the collective (comm thread, or caller when not overlapping)
    void unpack(size_t b);
    void comm_loop();
    void watchdog_loop();
    void reset_step();
    // A slot's place in the arena (host, or device on the device path).
    float* slot_data(const Slot& s) { return (dev_ ? dev_arena_ : arena_.data()) + s.offset; }
    Device arena_device() const { return dev_ ? Device::CUDA : Device::CPU; }

    // ---- device path (gradient_sync_nccl.cpp; see the header comment). ----
    struct DeviceState;  // events, arenas, per-bucket bookkeeping
    struct DeviceStateDeleter {
        void operator()(DeviceState* d) const;
    };
    bool init_device();              // takes the device path when it applies (allocates arenas and events)
    void device_enqueue_complete();  // enqueues, in bucket order, every complete bucket not yet enqueued
    double device_synchronize();     // synchronize()'s work on the device path; returns the host time blocked
    double device_wait_for(int set);  // polls one step's done events (stall warning/abort, bucket times); blocked time

    comm::Communicator* comm_ = nullptr;
    std::unique_ptr<comm::Communicator> owned_;
    std::vector<nn::Parameter*> params_;
    std::unordered_map<const nn::Parameter*, size_t> index_;
    std::vector<size_t> bucket_of_;    // per parameter
    std::vector<uint8_t> arrived_;     // per parameter, this step (caller's thread only)
    std::vector<Bucket> buckets_;
    std::vector<float> arena_;         // every bucket's slot, allocated once (host path)
    std::unique_ptr<DeviceState, DeviceStateDeleter> dev_;  // null on the host path
    float* dev_arena_ = nullptr;       // device path: every bucket's slot, on the GPU (owned by dev_)
    SyncOptions options_;
    telemetry::Timeline* timeline_ = nullptr;
    bool active_ = false;              // world size > 1 (or reduce_single_rank)
    bool overlap_ = false;
    bool relayout_pending_ = false;    // first step of a cycle-time layout (caller's thread only)
    std::vector<double> ready_s_;      // per parameter, when it was reported in the first step (< 0: not reported)
    int64_t step_ = 0;

    mutable std::mutex mutex_;
    std::condition_variable cv_;       // bucket state changes, stop
    size_t next_to_reduce_ = 0;        // comm thread's next bucket (guarded)
    bool stop_ = false;
    std::exception_ptr error_;
    SyncStats stats_;                  // guarded

    // The collective in flight, for the watchdog (guarded by mutex_).
    struct InFlight {
        bool active = false;
        size_t bucket = 0;
        int64_t step = 0;
        double start_s = 0;
        bool warned = false;
    } inflight_;
    std::condition_variable watchdog_cv_;  // only for stop_: the watchdog polls inflight_

    std::thread comm_thread_;
    std::thread watchdog_;
};

// Local SGD support: averages every parameter value across ranks (each rank steps on its own gradients and, every
// H steps, calls average()). Packs the values into fusion buffers of up to `fusion_bytes` in parameter order and runs
// one allreduce(Average) per buffer on the calling thread, over `comm` (borrowed; used on the calling thread only).
// A tensor larger than the buffer is reduced in place. Float32 only: parameter values are never rounded to 16 bits.
// A no-op on one rank. Collective.
class ParameterAverager {
public:
    ParameterAverager(comm::Communicator& comm, std::vector<nn::Parameter*> params, size_t fusion_bytes = 64u << 20);
    void average();
    uint64_t collectives() const { return collectives_; }

private:
    comm::Communicator& comm_;
    std::vector<nn::Parameter*> params_;
    std::vector<std::vector<size_t>> groups_;  // parameter indices packed together
    std::vector<float> buffer_;
    uint64_t collectives_ = 0;
};

}  // namespace ringtrain::sync

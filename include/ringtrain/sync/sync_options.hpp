// What GradientSync is configured with (SyncOptions) and what it reports (SyncStats).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::sync {

struct SyncOptions {
    size_t fusion_bytes = 64u << 20;  // bucket size cap in bytes of float32 gradients; 0 = one allreduce per tensor
    bool overlap = true;              // allreduce while backward goes on (communication thread / NCCL stream)
    comm::WireFormat wire = comm::WireFormat::Float32;  // Float16 / BFloat16: half the traffic, 16-bit rounding
    double stall_warning_s = 60;      // warn once per stalled collective after this long (<= 0: never)
    double stall_abort_s = 0;         // abort the job after this long (<= 0: never)
    double cycle_time_ms = 0;         // > 0 (with overlap, host paths): also split buckets by first-step ready
                                      // times (BucketLayout::by_time)
    size_t min_bucket_bytes = 1u << 20;  // a time gap closes a bucket only once it holds this much
    bool reduce_single_rank = false;  // run the collectives even on one rank: for tests and for measuring the overhead
    // A per-step vote (the trainer's stop request): when set, its value (nonzero = yes) rides as one extra float in
    // the last bucket's allreduce, so the ranks learn whether any of them voted without a collective of its own.
    // Read when the last bucket is packed; GradientSync::vote_any() gives the outcome after synchronize(). Host
    // paths only (GradientSync::carries_vote()). Must outlive its use (GradientSync::set_vote).
    const std::atomic<int>* vote = nullptr;
};

struct BucketStat {
    uint64_t bytes = 0;    // float32 payload of the bucket (what the allreduce averages), bytes
    uint64_t tensors = 0;  // gradients in the bucket
    uint64_t calls = 0;    // allreduces run
    double total_s = 0;    // their summed wall time (from the start of each collective to its end on this rank;
                           // on the device path GPU time between events, added one step late)
    // Achieved bus bandwidth in decimal GB/s, nccl-tests convention: algbw = bytes / (total_s / calls),
    // busbw = algbw · 2(n−1)/n. 0 when nothing was measured or world_size < 2.
    double busbw_gbs(int world_size) const;
};

struct SyncStats {
    double blocked_s = 0;      // time synchronize() spent waiting for communication (the part overlap did not hide);
                               // with overlap off, the time of the collectives themselves; on the device path,
                               // the host's wait for the previous step's collectives
    uint64_t collectives = 0;  // allreduces issued
    uint64_t steps = 0;        // synchronize() calls
    std::vector<BucketStat> buckets;
};

}  // namespace ringtrain::sync

// BucketLayout: which gradients travel together. Fusion buckets in the order backward reports the gradients (the
// reverse of the parameter list: last layer first), each a contiguous region of one arena of floats. Pure: gradient
// sizes (and ready times) in, buckets out; no communication, no threads.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace ringtrain::sync {

// One gradient's place in the arena.
struct BucketSlot {
    size_t param;   // index in the parameter list
    size_t offset;  // in the arena, floats
    size_t count;   // floats
};

struct Bucket {
    std::vector<BucketSlot> slots;  // in backward order
    size_t offset = 0, count = 0;   // the bucket's region of the arena, floats
};

class BucketLayout {
public:
    // Greedy by size: each bucket takes gradients up to `fusion_bytes` (a larger one gets a bucket of its own;
    // 0 gives one bucket per gradient). `grad_floats[i]` is parameter i's gradient size.
    static BucketLayout by_size(std::vector<size_t> grad_floats, size_t fusion_bytes);
    // by_size, and a bucket is also closed when the next gradient became ready more than `cycle_time_ms` after the
    // bucket's first one, provided it already holds `min_bucket_bytes` (Horovod's cycle time with DDP's minimum
    // first bucket: a smaller allreduce is latency, not bandwidth). `ready_s[i]`: when gradient i became ready.
    // So gradients that backward produces together travel together, and a slow layer's backward is overlapped with
    // the allreduce of the layers after it. Why the minimum: bench/RESULTS.md, "GradientSync: the measurements
    // behind its choices".
    static BucketLayout by_time(std::vector<size_t> grad_floats, size_t fusion_bytes, size_t min_bucket_bytes,
                                double cycle_time_ms, std::span<const double> ready_s);
    // The layout with this many gradients per bucket (what tensors_per_bucket() returns; rank 0 sends it to the
    // others). Throws Error when they do not add up to grad_floats.size().
    BucketLayout(std::vector<size_t> grad_floats, std::span<const size_t> tensors_per_bucket);

    size_t size() const { return buckets_.size(); }
    const Bucket& bucket(size_t b) const { return buckets_.at(b); }
    const std::vector<Bucket>& buckets() const { return buckets_; }
    size_t gradients() const { return grad_floats_.size(); }
    size_t bucket_of(size_t param) const { return bucket_of_.at(param); }
    const BucketSlot& slot_of(size_t param) const;
    size_t total_floats() const;
    size_t largest_bucket_floats() const;
    std::vector<size_t> tensors_per_bucket() const;
    // Bucket b's parameter indices, in order.
    std::vector<size_t> params(size_t b) const;

private:
    static std::vector<size_t> greedy(const std::vector<size_t>& grad_floats, size_t fusion_bytes,
                                      size_t min_bucket_bytes, double cycle_time_ms, std::span<const double> ready_s);

    std::vector<size_t> grad_floats_;
    std::vector<Bucket> buckets_;
    std::vector<size_t> bucket_of_;  // per parameter
    std::vector<size_t> slot_in_bucket_;  // per parameter
};

}  // namespace ringtrain::sync

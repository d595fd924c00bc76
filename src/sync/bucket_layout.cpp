// BucketLayout: greedy fusion buckets in backward order (see the header).
#include "ringtrain/sync/bucket_layout.hpp"

#include <algorithm>
#include <string>

#include "ringtrain/core/error.hpp"

namespace ringtrain::sync {

std::vector<size_t> BucketLayout::greedy(const std::vector<size_t>& grad_floats, size_t fusion_bytes,
                                         size_t min_bucket_bytes, double cycle_time_ms, std::span<const double> ready_s) {
    const bool by_time = !ready_s.empty();
    const double cycle_s = cycle_time_ms * 1e-3;
    std::vector<size_t> layout;
    size_t bucket_bytes = 0;
    double bucket_t0 = 0;
    for (size_t k = grad_floats.size(); k-- > 0;) {
        const size_t bytes = grad_floats[k] * sizeof(float);
        const double t = by_time ? ready_s[k] : 0.0;
        const bool in_window = t - bucket_t0 <= cycle_s || bucket_bytes < min_bucket_bytes;
        const bool fits = !layout.empty() && fusion_bytes > 0 && bucket_bytes + bytes <= fusion_bytes &&
                          bucket_bytes + bytes >= bytes &&  // no overflow
                          (!by_time || in_window);
        if (!fits) {
            layout.push_back(0);
            bucket_bytes = 0;
            bucket_t0 = t;
        } else if (t - bucket_t0 > cycle_s) {
            bucket_t0 = t;  // joined only because the bucket was under min_bucket_bytes: a new window
        }
        ++layout.back();
        bucket_bytes += bytes;
    }
    return layout;
}

BucketLayout BucketLayout::by_size(std::vector<size_t> grad_floats, size_t fusion_bytes) {
    const auto tensors = greedy(grad_floats, fusion_bytes, 0, 0, {});
    return BucketLayout(std::move(grad_floats), tensors);
}

BucketLayout BucketLayout::by_time(std::vector<size_t> grad_floats, size_t fusion_bytes, size_t min_bucket_bytes,
                                   double cycle_time_ms, std::span<const double> ready_s) {
    if (ready_s.size() != grad_floats.size())
        throw Error("BucketLayout: " + std::to_string(ready_s.size()) + " ready times for " +
                    std::to_string(grad_floats.size()) + " gradients");
    const auto tensors = greedy(grad_floats, fusion_bytes, min_bucket_bytes, cycle_time_ms, ready_s);
    return BucketLayout(std::move(grad_floats), tensors);
}

BucketLayout::BucketLayout(std::vector<size_t> grad_floats, std::span<const size_t> tensors_per_bucket)
    : grad_floats_(std::move(grad_floats)) {
    size_t listed = 0;
    for (size_t n : tensors_per_bucket) {
        if (n == 0) throw Error("BucketLayout: an empty bucket");
        listed += n;
    }
    if (listed != grad_floats_.size())
        throw Error("BucketLayout: buckets of " + std::to_string(listed) + " gradients for " +
                    std::to_string(grad_floats_.size()));
    bucket_of_.assign(grad_floats_.size(), 0);
    slot_in_bucket_.assign(grad_floats_.size(), 0);
    size_t offset = 0;
    size_t k = grad_floats_.size();
    for (size_t n : tensors_per_bucket) {
        Bucket& b = buckets_.emplace_back();
        b.offset = offset;
        for (size_t t = 0; t < n; ++t) {
            --k;
            const size_t count = grad_floats_[k];
            bucket_of_[k] = buckets_.size() - 1;
            slot_in_bucket_[k] = b.slots.size();
            b.slots.push_back({k, offset, count});
            b.count += count;
            offset += count;
        }
    }
}

const BucketSlot& BucketLayout::slot_of(size_t param) const {
    return buckets_[bucket_of(param)].slots[slot_in_bucket_[param]];
}

size_t BucketLayout::total_floats() const {
    size_t total = 0;
    for (const Bucket& b : buckets_) total += b.count;
    return total;
}

size_t BucketLayout::largest_bucket_floats() const {
    size_t largest = 0;
    for (const Bucket& b : buckets_) largest = std::max(largest, b.count);
    return largest;
}

std::vector<size_t> BucketLayout::tensors_per_bucket() const {
    std::vector<size_t> out;
    for (const Bucket& b : buckets_) out.push_back(b.slots.size());
    return out;
}

std::vector<size_t> BucketLayout::params(size_t b) const {
    std::vector<size_t> out;
    for (const BucketSlot& s : bucket(b).slots) out.push_back(s.param);
    return out;
}

}  // namespace ringtrain::sync

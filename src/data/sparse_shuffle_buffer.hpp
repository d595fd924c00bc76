// The in-memory shuffle of a row stream (as tf.data's shuffle): hold up to `capacity` rows; each output is a
// uniformly drawn held row, whose slot the next incoming row takes. Slots keep their vectors' capacity, so a
// steady state allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "ringtrain/core/csr_batch.hpp"
#include "ringtrain/core/rng.hpp"

namespace ringtrain::data {

class SparseShuffleBuffer {
public:
    explicit SparseShuffleBuffer(int64_t capacity) : slots_(static_cast<size_t>(capacity)) {}
    void reset(uint64_t seed) {
        size_ = 0;
        rng_.seed_with(seed);
    }
    int64_t size() const { return size_; }
    bool full() const { return size_ == static_cast<int64_t>(slots_.size()); }
    // Holds row r of `batch` (the caller checks full() first).
    void push(const CsrBatch& batch, int64_t r) { assign(slots_[static_cast<size_t>(size_++)], batch, r); }
    // Draws a held row, appends it to `out`, and fills its slot with row r of `batch` (or, without one, with the
    // last held row).
    void pop_into(CsrBatch& out, const CsrBatch* batch, int64_t r) {
        const auto j = static_cast<size_t>(rng_.below(static_cast<uint64_t>(size_)));
        Slot& s = slots_[j];
        out.add_row(s.label, s.indices, s.values);
        if (batch) {
            assign(s, *batch, r);
        } else {
            std::swap(s, slots_[static_cast<size_t>(--size_)]);
        }
    }

private:
    struct Slot {
        float label = 0;
        std::vector<uint32_t> indices;
        std::vector<float> values;
    };
    static void assign(Slot& s, const CsrBatch& batch, int64_t r) {
        const auto idx = batch.row_indices(r);
        const auto val = batch.row_values(r);
        s.label = batch.labels[static_cast<size_t>(r)];
        s.indices.assign(idx.begin(), idx.end());
        s.values.assign(val.begin(), val.end());
    }

    std::vector<Slot> slots_;
    int64_t size_ = 0;
    Rng rng_;
};

}  // namespace ringtrain::data

// CsrBatch: a batch of sparse rows (click-log lines) in compressed-sparse-row form. The one type the sparse
// readers (data/) produce and the sparse model (nn/) consumes; it lives in core so neither depends on the other.
// Row r's features are indices[offsets[r] .. offsets[r+1]) with the matching values; indices are strictly
// increasing within a row and below the feature count the reader was opened with.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ringtrain {

struct CsrBatch {
    std::vector<int64_t> offsets{0};  // rows() + 1 entries, offsets[0] = 0
    std::vector<uint32_t> indices;    // feature ids, nnz() entries
    std::vector<float> values;        // one per index
    std::vector<float> labels;        // one per row: 0/1 (binary) or 0..K-1 (multi-class)

    int64_t rows() const { return static_cast<int64_t>(offsets.size()) - 1; }
    int64_t nnz() const { return offsets.back(); }
    std::span<const uint32_t> row_indices(int64_t r) const {
        return {indices.data() + offsets[r], static_cast<size_t>(offsets[r + 1] - offsets[r])};
    }
    std::span<const float> row_values(int64_t r) const {
        return {values.data() + offsets[r], static_cast<size_t>(offsets[r + 1] - offsets[r])};
    }
    void clear() {
        offsets.assign(1, 0);
        indices.clear();
        values.clear();
        labels.clear();
    }
    // Appends one row (the caller guarantees the index order).
    void add_row(float label, std::span<const uint32_t> idx, std::span<const float> val) {
        indices.insert(indices.end(), idx.begin(), idx.end());
        values.insert(values.end(), val.begin(), val.end());
        labels.push_back(label);
        offsets.push_back(static_cast<int64_t>(indices.size()));
    }
};

}  // namespace ringtrain

// SparseRows: some rows of a [num_rows x width] table, the others implied zero — the sparse gradient of an
// embedding-bag / sparse linear layer (the rows a batch touched, merged) and what sparse optimizers apply.
// Shared by nn (produces), sync (averages across ranks) and optim (applies), so it lives in core.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ringtrain {

struct SparseRows {
    int64_t width = 0;            // values per row (the layer's out_features)
    std::vector<uint32_t> rows;   // row ids, sorted ascending and unique
    std::vector<float> values;    // rows.size() * width, row-major: row rows[i] is values[i*width .. (i+1)*width)

    int64_t count() const { return static_cast<int64_t>(rows.size()); }
    std::span<float> row(int64_t i) { return {values.data() + i * width, static_cast<size_t>(width)}; }
    std::span<const float> row(int64_t i) const { return {values.data() + i * width, static_cast<size_t>(width)}; }
    void clear() {
        rows.clear();
        values.clear();
    }
};

}  // namespace ringtrain

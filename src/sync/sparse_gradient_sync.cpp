// SparseGradientSync (see the header): one tiny allgather of the row counts, then either an allgather of
// (ids, rows, dense part) merged locally, or one dense allreduce of [table | dense part | packed touched counts].
#include "ringtrain/sync/sparse_gradient_sync.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ringtrain/core/error.hpp"

namespace ringtrain::sync {

namespace {

// The dense path returns the union of the ranks' rows, so it reduces a touched count per row along with the
// values. A count is 0..N and needs b = bit_width(N) bits; float32 holds integers below 2^24 exactly and sums of
// them stay exact, so floor(24/b) counts share one float without ever carrying into each other.
int64_t marker_rows_per_float(int64_t world) {
    const int bits = std::bit_width(static_cast<uint64_t>(std::max<int64_t>(world, 1)));
    return std::max<int64_t>(1, 24 / bits);
}

int64_t marker_floats(int64_t num_rows, int64_t world) {
    const int64_t per = marker_rows_per_float(world);
    return (num_rows + per - 1) / per;
}

// The ring allreduce's share per rank: 2(N-1)/N of the buffer.
uint64_t ring_bytes(int64_t world, uint64_t floats) {
    if (world <= 1) return 0;
    return 2 * static_cast<uint64_t>(world - 1) * floats * sizeof(float) / static_cast<uint64_t>(world);
}

float id_as_float(uint32_t id) { return std::bit_cast<float>(id); }  // ids travel bit for bit in the float gather
uint32_t float_as_id(float f) { return std::bit_cast<uint32_t>(f); }

// Merges sorted row lists a (the earlier ranks' sum) and b (the next rank's rows) into out, summing a row found in
// both as a + b; returns the number of rows written (out has room for na + nb). Branch-free: the ids are random, so
// an if/else per row mispredicts about half the time. A row on one side only adds 0.0f, which leaves its values
// as they are. W = 1 (logistic regression's one output) is compiled on its own: the general loop over the width
// cost ~47 instructions a row, most of a step's sync time (bench/RESULTS.md, "Sparse logistic regression").
template <size_t W>
size_t merge_sorted_rows(const uint32_t* ra, const float* va, size_t na, const float* ids_b, const float* vb, size_t nb,
                         size_t runtime_w, uint32_t* out_rows, float* out) {
    const size_t w = W > 0 ? W : runtime_w;
    size_t a = 0, b = 0, m = 0;
    while (a < na && b < nb) {
        const uint32_t ida = ra[a], idb = std::bit_cast<uint32_t>(ids_b[b]);
        const bool take_a = ida <= idb, take_b = idb <= ida;
        out_rows[m] = take_a ? ida : idb;
        for (size_t k = 0; k < w; ++k)
            out[m * w + k] = (take_a ? va[a * w + k] : 0.0f) + (take_b ? vb[b * w + k] : 0.0f);
        a += take_a;
        b += take_b;
        ++m;
    }
    for (; a < na; ++a, ++m) {
        out_rows[m] = ra[a];
        for (size_t k = 0; k < w; ++k) out[m * w + k] = va[a * w + k];
    }
    for (; b < nb; ++b, ++m) {
        out_rows[m] = std::bit_cast<uint32_t>(ids_b[b]);
        for (size_t k = 0; k < w; ++k) out[m * w + k] = vb[b * w + k];
    }
    return m;
}

}  // namespace

struct SparseGradientSync::State {
    comm::Communicator& comm;
    int64_t num_rows, width;
    SparseSyncMethod method;
    SparseSyncStats stats;

    std::vector<int64_t> counts;  // every rank's row count this step
    // allgather path
    std::vector<float> send;                      // ids (bit-cast) | rows | dense part
    std::vector<size_t> block;                    // start of each rank's block in the gathered vector
    std::vector<uint32_t> merged_rows;            // the merge's output, swapped with the gradient's
    std::vector<float> merged_values;
    // dense path: [num_rows x width | dense part | packed touched counts], zero between steps
    std::vector<float> dense;

    State(comm::Communicator& c, int64_t r, int64_t w, SparseSyncMethod m) : comm(c), num_rows(r), width(w), method(m) {}

    void check_input(const SparseRows& grad) const;
    void by_allgather(SparseRows& grad, std::span<float> dense_part);
    void by_dense(SparseRows& grad, std::span<float> dense_part);
};

SparseGradientSync::SparseGradientSync(comm::Communicator& comm, int64_t num_rows, int64_t width, SparseSyncMethod method) {
    if (num_rows <= 0 || width <= 0)
        throw Error("SparseGradientSync: the table must have rows and columns (got " + std::to_string(num_rows) + " x " +
                    std::to_string(width) + ")");
    if (num_rows > (int64_t{1} << 32))
        throw Error("SparseGradientSync: " + std::to_string(num_rows) + " rows do not fit 32-bit row ids");
    state_ = std::make_unique<State>(comm, num_rows, width, method);
}

SparseGradientSync::~SparseGradientSync() = default;

void SparseGradientSync::allocate_dense_buffer(size_t dense_size) {
    State& s = *state_;
    const int world = s.comm.size();
    if (s.method == SparseSyncMethod::Allgather || world == 1) return;
    // The layout by_dense uses (its size check then finds it in place).
    s.dense.assign(static_cast<size_t>(s.num_rows * s.width) + dense_size +
                       static_cast<size_t>(marker_floats(s.num_rows, world)), 0.0f);
}

const SparseSyncStats& SparseGradientSync::stats() const { return state_->stats; }

SparseGradientSync::Choice SparseGradientSync::choose(SparseSyncMethod method, std::span<const int64_t> rows_per_rank,
                                                      int64_t num_rows, int64_t width) {
    const auto world = static_cast<int64_t>(rows_per_rank.size());
    Choice c{SparseSyncMethod::Allgather, 0, 0};
    if (world > 1) {
        uint64_t total = 0;
        for (int64_t r : rows_per_rank) total += static_cast<uint64_t>(r) * (4 + 4 * static_cast<uint64_t>(width));
        c.allgather_bytes = total * static_cast<uint64_t>(world - 1) / static_cast<uint64_t>(world);
        c.dense_bytes = ring_bytes(world, static_cast<uint64_t>(num_rows * width + marker_floats(num_rows, world)));
    }
    if (method == SparseSyncMethod::Auto)
        c.method = c.allgather_bytes <= c.dense_bytes ? SparseSyncMethod::Allgather : SparseSyncMethod::Dense;
    else
        c.method = method;
    return c;
}

void SparseGradientSync::State::check_input(const SparseRows& grad) const {
    // Broken input would corrupt other ranks' results silently, so it is checked here (O(rows), next to the merge).
    if (grad.width != width && !(grad.rows.empty() && grad.width == 0))
        throw Error("SparseGradientSync: gradient rows are " + std::to_string(grad.width) + " wide, the table " +
                    std::to_string(width));
    if (grad.values.size() != grad.rows.size() * static_cast<size_t>(width))
        throw Error("SparseGradientSync: " + std::to_string(grad.rows.size()) + " rows but " +
                    std::to_string(grad.values.size()) + " values");
    for (size_t i = 0; i < grad.rows.size(); ++i) {
        if (grad.rows[i] >= static_cast<uint64_t>(num_rows))
            throw Error("SparseGradientSync: row " + std::to_string(grad.rows[i]) + " is past the table's " +
                        std::to_string(num_rows) + " rows");
        if (i > 0 && grad.rows[i] <= grad.rows[i - 1])
            throw Error("SparseGradientSync: gradient rows are not sorted and unique (" + std::to_string(grad.rows[i - 1]) +
                        " then " + std::to_string(grad.rows[i]) + ")");
    }
}

void SparseGradientSync::average(SparseRows& grad, std::span<float> dense_part) {
    State& s = *state_;
    s.check_input(grad);
    grad.width = s.width;
    const int world = s.comm.size();
    s.counts.resize(static_cast<size_t>(world));
    if (world > 1) {
        const std::vector<uint64_t> all = s.comm.allgather(static_cast<uint64_t>(grad.count()));
        for (int r = 0; r < world; ++r) s.counts[static_cast<size_t>(r)] = static_cast<int64_t>(all[static_cast<size_t>(r)]);
    } else {
        s.counts[0] = grad.count();
    }
    const Choice c = choose(s.method, s.counts, s.num_rows, s.width);
    if (c.method == SparseSyncMethod::Dense) {
        s.by_dense(grad, dense_part);
    } else {
        s.by_allgather(grad, dense_part);
    }
}

void SparseGradientSync::State::by_allgather(SparseRows& grad, std::span<float> dense_part) {
    const int world = comm.size();
    const size_t w = static_cast<size_t>(width), nd = dense_part.size();
    const size_t mine = grad.rows.size();
    send.resize(mine * (1 + w) + nd);
    for (size_t i = 0; i < mine; ++i) send[i] = id_as_float(grad.rows[i]);
    std::copy(grad.values.begin(), grad.values.end(), send.begin() + static_cast<std::ptrdiff_t>(mine));
    std::copy(dense_part.begin(), dense_part.end(), send.begin() + static_cast<std::ptrdiff_t>(mine * (1 + w)));
    ++stats.allgather_steps;
    stats.bytes_allgather += static_cast<uint64_t>(world - 1) * send.size() * sizeof(float);
    if (world == 1) return;  // the average of one rank is itself

    const std::vector<float> all = comm.allgather(std::span<const float>(send));
    block.resize(static_cast<size_t>(world) + 1);
    block[0] = 0;
    for (int r = 0; r < world; ++r)
        block[r + 1] = block[r] + static_cast<size_t>(counts[static_cast<size_t>(r)]) * (1 + w) + nd;
    if (all.size() != block[static_cast<size_t>(world)])
        throw Error("SparseGradientSync: gathered " + std::to_string(all.size()) + " floats, expected " +
                    std::to_string(block[static_cast<size_t>(world)]) + " (do all ranks pass the same dense part?)");
    auto row_at = [&](int r, int64_t i) {
        return all.data() + block[static_cast<size_t>(r)] + static_cast<size_t>(counts[static_cast<size_t>(r)]) +
               static_cast<size_t>(i) * w;
    };

    // Rank 0's sorted list, then each further rank's merged into it in turn: a row's values are summed in rank
    // order, ((r0 + r1) + r2) + ..., so every rank ends with the same bits. Two-way merges cost O(N · rows) with a
    // small constant; a heap over N lists was 10x slower per row at N = 2 and made the merge most of a step's
    // sync time (bench/RESULTS.md, "Sparse logistic regression").
    const size_t n0 = static_cast<size_t>(counts[0]);
    grad.rows.resize(n0);
    const float* ids0 = all.data() + block[0];
    for (size_t i = 0; i < n0; ++i) grad.rows[i] = float_as_id(ids0[i]);
    grad.values.assign(row_at(0, 0), row_at(0, 0) + n0 * w);
    for (int r = 1; r < world; ++r) {
        const size_t na = grad.rows.size(), nb = static_cast<size_t>(counts[static_cast<size_t>(r)]);
        if (nb == 0) continue;
        // Into buffers sized for the worst case (no row shared), swapped with the gradient's afterwards.
        merged_rows.resize(na + nb);
        merged_values.resize((na + nb) * w);
        const uint32_t* ra = grad.rows.data();
        const float* va = grad.values.data();
        const float* ids_b = all.data() + block[static_cast<size_t>(r)];
        const float* vb = row_at(r, 0);
        const size_t m = w == 1 ? merge_sorted_rows<1>(ra, va, na, ids_b, vb, nb, w, merged_rows.data(), merged_values.data())
                                : merge_sorted_rows<0>(ra, va, na, ids_b, vb, nb, w, merged_rows.data(), merged_values.data());
        merged_rows.resize(m);
        merged_values.resize(m * w);
        grad.rows.swap(merged_rows);
        grad.values.swap(merged_values);
    }
    const float n = static_cast<float>(world);
    for (float& v : grad.values) v /= n;
    for (size_t j = 0; j < nd; ++j) {
        float sum = 0.0f;
        for (int r = 0; r < world; ++r) sum += all[block[static_cast<size_t>(r) + 1] - nd + j];
        dense_part[j] = sum / n;
    }
}

void SparseGradientSync::State::by_dense(SparseRows& grad, std::span<float> dense_part) {
    const int world = comm.size();
    const size_t w = static_cast<size_t>(width), nd = dense_part.size();
    const size_t table = static_cast<size_t>(num_rows) * w;
    const int64_t per = marker_rows_per_float(world);
    const int bits = std::bit_width(static_cast<uint64_t>(world));
    const size_t markers = static_cast<size_t>(marker_floats(num_rows, world));
    const size_t total = table + nd + markers;
    if (dense.size() != total) dense.assign(total, 0.0f);  // once (the dense part's size is fixed by the model)
    float* values = dense.data();
    float* dense_sum = values + table;
    float* marker = dense_sum + nd;

    for (size_t i = 0; i < grad.rows.size(); ++i) {
        const uint32_t row = grad.rows[i];
        std::copy_n(grad.values.data() + i * w, w, values + static_cast<size_t>(row) * w);
        const auto shift = static_cast<unsigned>((row % static_cast<uint64_t>(per)) * static_cast<uint64_t>(bits));
        marker[row / static_cast<uint64_t>(per)] += static_cast<float>(uint32_t{1} << shift);
    }
    std::copy(dense_part.begin(), dense_part.end(), dense_sum);
    ++stats.dense_steps;
    stats.bytes_dense += ring_bytes(world, total);
    if (world > 1) comm.allreduce(std::span<float>(dense), comm::ReduceOp::Sum);

    // Gather back the union (rows whose summed touched count is nonzero) and leave the buffer zero again.
    const float n = static_cast<float>(world);
    const uint32_t field = (uint32_t{1} << bits) - 1;
    grad.clear();
    for (size_t m = 0; m < markers; ++m) {
        if (marker[m] == 0.0f) continue;
        const auto packed = static_cast<uint32_t>(marker[m]);
        marker[m] = 0.0f;
        for (int64_t j = 0; j < per; ++j) {
            if (((packed >> (static_cast<unsigned>(j) * static_cast<unsigned>(bits))) & field) == 0) continue;
            const auto row = static_cast<uint32_t>(static_cast<int64_t>(m) * per + j);
            float* src = values + static_cast<size_t>(row) * w;
            grad.rows.push_back(row);
            for (size_t k = 0; k < w; ++k) {
                grad.values.push_back(src[k] / n);
                src[k] = 0.0f;
            }
        }
    }
    for (size_t j = 0; j < nd; ++j) {
        dense_part[j] = dense_sum[j] / n;
        dense_sum[j] = 0.0f;
    }
}

}  // namespace ringtrain::sync

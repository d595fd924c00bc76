// SparseGradientSync (see the header): one tiny allgather of the row counts, then either an allgather of
// (ids, rows, dense part) merged locally, or one dense allreduce of [table | dense part | packed touched counts].
#include "ringtrain/sync/sparse_gradient_sync.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
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
    std::vector<std::pair<uint32_t, int>> heap;   // (next id, rank): the k-way merge, ids ascending, ranks in order
    std::vector<int64_t> next;                    // per rank: index of its next row
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
    auto id_at = [&](int r, int64_t i) { return float_as_id(all[block[static_cast<size_t>(r)] + static_cast<size_t>(i)]); };
    auto row_at = [&](int r, int64_t i) {
        return all.data() + block[static_cast<size_t>(r)] + static_cast<size_t>(counts[static_cast<size_t>(r)]) +
               static_cast<size_t>(i) * w;
    };

    // k-way merge of the ranks' sorted lists; ties pop in rank order, so every rank sums in the same order and
    // ends with the same bits.
    const std::greater<std::pair<uint32_t, int>> later;
    heap.clear();
    next.assign(static_cast<size_t>(world), 0);
    for (int r = 0; r < world; ++r)
        if (counts[static_cast<size_t>(r)] > 0) heap.emplace_back(id_at(r, 0), r);
    std::make_heap(heap.begin(), heap.end(), later);
    grad.clear();
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const auto [id, r] = heap.back();
        heap.pop_back();
        const float* src = row_at(r, next[static_cast<size_t>(r)]);
        if (!grad.rows.empty() && grad.rows.back() == id) {
            float* dst = grad.values.data() + grad.values.size() - w;
            for (size_t k = 0; k < w; ++k) dst[k] += src[k];
        } else {
            grad.rows.push_back(id);
            grad.values.insert(grad.values.end(), src, src + w);
        }
        if (++next[static_cast<size_t>(r)] < counts[static_cast<size_t>(r)]) {
            heap.emplace_back(id_at(r, next[static_cast<size_t>(r)]), r);
            std::push_heap(heap.begin(), heap.end(), later);
        }
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

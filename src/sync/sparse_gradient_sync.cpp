// SparseGradientSync (see the header): one gather of fixed-size slots [header | ids | rows] (the rows that fit),
// then — only when some rank's rows did not fit — either the rest by an allgatherv, merged locally (all rows, or
// with owner updates this rank's group of them), or one dense allreduce of [table | dense part | packed touched
// counts]. Owner updates then share the updated rows through UpdatedRowShare.
#include "ringtrain/sync/sparse_gradient_sync.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "updated_row_share.hpp"

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

// Merges sorted row lists a (rank 0's rows, or the earlier ranks' sum) and b (the next rank's rows) into out,
// summing a row found in both as a + b and dividing every row by `div` (1 except on the last merge, where it is
// the world size: x / 1 is x, so the sums are the same bits as summing first and dividing after); returns the
// number of rows written (out has room for na + nb). Branch-free: the ids are random, so an if/else per row
// mispredicts about half the time. A row on one side only adds 0.0f, which leaves its values as they are but for
// -0.0 (it becomes +0.0): the loops after one side runs out add 0.0f too, so a row's bits do not depend on where
// the other list ends — owner updates merge parts of the lists, and must give each row the bits the whole
// lists give it. W = 1
// (logistic regression's one output) is compiled on its own: the general loop over the width cost ~47
// instructions a row (bench/RESULTS.md, "Sparse logistic regression"). Ids are uint32 or travel bit-cast in floats.
template <size_t W, class IdA>
size_t merge_sorted_rows(const IdA* ids_a, const float* va, size_t na, const float* ids_b, const float* vb, size_t nb,
                         size_t runtime_w, float div, uint32_t* out_rows, float* out) {
    const size_t w = W > 0 ? W : runtime_w;
    size_t a = 0, b = 0, m = 0;
    while (a < na && b < nb) {
        const uint32_t ida = std::bit_cast<uint32_t>(ids_a[a]), idb = std::bit_cast<uint32_t>(ids_b[b]);
        const bool take_a = ida <= idb, take_b = idb <= ida;
        out_rows[m] = take_a ? ida : idb;
        for (size_t k = 0; k < w; ++k)
            out[m * w + k] = ((take_a ? va[a * w + k] : 0.0f) + (take_b ? vb[b * w + k] : 0.0f)) / div;
        a += take_a;
        b += take_b;
        ++m;
    }
    for (; a < na; ++a, ++m) {
        out_rows[m] = std::bit_cast<uint32_t>(ids_a[a]);
        for (size_t k = 0; k < w; ++k) out[m * w + k] = (va[a * w + k] + 0.0f) / div;
    }
    for (; b < nb; ++b, ++m) {
        out_rows[m] = std::bit_cast<uint32_t>(ids_b[b]);
        for (size_t k = 0; k < w; ++k) out[m * w + k] = (0.0f + vb[b * w + k]) / div;
    }
    return m;
}

template <class IdA>
size_t merge_rows(size_t w, const IdA* ids_a, const float* va, size_t na, const float* ids_b, const float* vb,
                  size_t nb, float div, uint32_t* out_rows, float* out) {
    return w == 1 ? merge_sorted_rows<1>(ids_a, va, na, ids_b, vb, nb, w, div, out_rows, out)
                  : merge_sorted_rows<0>(ids_a, va, na, ids_b, vb, nb, w, div, out_rows, out);
}

// A uint64 carried bit for bit in two floats of the gathered slots.
template <class T>
void put2(float* at, T v) {
    static_assert(sizeof(T) == 2 * sizeof(float));
    std::memcpy(at, &v, sizeof(T));
}
template <class T>
T get2(const float* at) {
    T v;
    std::memcpy(&v, at, sizeof(T));
    return v;
}

}  // namespace

struct SparseGradientSync::State {
    comm::Communicator& comm;
    int64_t num_rows, width;
    SparseSyncMethod method;
    SparseUpdate update;
    SparseSyncStats stats;
    bool owned_only = false;  // the last average() left only this rank's owned rows
    std::unique_ptr<UpdatedRowShare> share;  // owner updates at N > 1
    std::function<bool()> idle;              // set_idle_work
    // Owner updates: this rank's rows grouped by owner (what its slot carries), each row's owner, group starts.
    SparseRows grouped;
    std::vector<uint32_t> row_owner, group_start;

    std::vector<int64_t> counts;  // every rank's row count this step
    // The step's gather: per rank a slot [count (2 floats) | owner updates: its N group sizes | dense part | ids
    // (capacity, bit-cast) | rows (capacity x width)]; capacity follows the largest count seen (the same on every
    // rank).
    size_t capacity = 0;
    std::vector<float> send, all;
    std::vector<size_t> slot_counts;
    // Rows that did not fit a slot: [ids | rows] past the capacity, gathered second; staged per rank contiguous.
    std::vector<float> tail_send, tail_all;
    std::vector<size_t> tail_counts;
    std::vector<std::vector<float>> staged;
    std::vector<uint32_t> merged_rows, merged_rows2;  // the merges' outputs (ping-pong), swapped with the gradient's
    std::vector<float> merged_values, merged_values2;
    // dense path: [num_rows x width | dense part | packed touched counts], zero between steps
    std::vector<float> dense;

    State(comm::Communicator& c, int64_t r, int64_t w, SparseSyncMethod m, SparseUpdate u)
        : comm(c), num_rows(r), width(w), method(m), update(u) {
        if (update == SparseUpdate::Owner && comm.size() > 1) share = std::make_unique<UpdatedRowShare>(comm, num_rows);
    }

    void check_input(const SparseRows& grad) const;
    void gathered(SparseRows& grad, std::span<float> dense_part);
    const SparseRows& group_by_owner(const SparseRows& grad, float* group_sizes);
    void merge_gathered(SparseRows& grad, std::span<float> dense_part, size_t head, size_t room);
    void by_dense(SparseRows& grad, std::span<float> dense_part);
};

SparseGradientSync::SparseGradientSync(comm::Communicator& comm, int64_t num_rows, int64_t width, SparseSyncMethod method,
                                       SparseUpdate update) {
    if (num_rows <= 0 || width <= 0)
        throw Error("SparseGradientSync: the table must have rows and columns (got " + std::to_string(num_rows) + " x " +
                    std::to_string(width) + ")");
    if (num_rows > (int64_t{1} << 32))
        throw Error("SparseGradientSync: " + std::to_string(num_rows) + " rows do not fit 32-bit row ids");
    state_ = std::make_unique<State>(comm, num_rows, width, method, update);
}

int SparseGradientSync::owner_of_row(uint32_t row, int world) {
    // Fibonacci hashing: the multiply by 2^32 / golden ratio (odd, so a bijection of uint32) spreads runs of
    // consecutive ids and strided ids evenly; its top bits scaled to [0, world).
    const uint32_t mixed = row * 0x9E3779B1u;
    return static_cast<int>((static_cast<uint64_t>(mixed) * static_cast<uint64_t>(world)) >> 32);
}

bool SparseGradientSync::owned_rows_only() const { return state_->owned_only; }

void SparseGradientSync::share_updated_rows(SparseRows& rows, std::span<double> sums) {
    State& s = *state_;
    if (!s.owned_only) throw Error("SparseGradientSync: share_updated_rows() after a step that was not an owner step");
    const int me = s.comm.rank(), world = s.comm.size();
    if (rows.width <= 0 || rows.values.size() != rows.rows.size() * static_cast<size_t>(rows.width))
        throw Error("SparseGradientSync: updated rows of width " + std::to_string(rows.width) + " with " +
                    std::to_string(rows.rows.size()) + " rows and " + std::to_string(rows.values.size()) + " values");
    // Without an early exit (it vectorises); the message then names the first bad row.
    const std::vector<uint32_t>& ids = rows.rows;
    bool bad = !ids.empty() && owner_of_row(ids[0], world) != me;
    for (size_t i = 1; i < ids.size(); ++i) bad |= (owner_of_row(ids[i], world) != me) | (ids[i] <= ids[i - 1]);
    for (size_t i = 0; bad && i < rows.rows.size(); ++i)
        if (owner_of_row(rows.rows[i], world) != me || (i > 0 && rows.rows[i] <= rows.rows[i - 1]))
            throw Error("SparseGradientSync: updated row " + std::to_string(rows.rows[i]) + " is not this rank's (rank " +
                        std::to_string(owner_of_row(rows.rows[i], world)) + " owns it) or out of order");
    s.owned_only = false;  // one share per owner step
    const UpdatedRowShare::Sent sent = s.share->share(rows, sums);
    s.stats.bytes_state += sent.payload_bytes;
    s.stats.bytes_allgather += sent.payload_bytes;
    s.stats.state_second_collectives += sent.second_collective ? 1 : 0;
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

void SparseGradientSync::set_idle_work(std::function<bool()> idle) {
    state_->idle = std::move(idle);
    if (state_->share) state_->share->set_idle_work(state_->idle);
}

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
    s.owned_only = false;
    if (s.comm.size() > 1) {
        s.gathered(grad, dense_part);
        return;
    }
    // One rank: the average is the gradient itself (dense: the same round trip through the buffer, no collective).
    s.counts.assign(1, grad.count());
    if (choose(s.method, s.counts, s.num_rows, s.width).method == SparseSyncMethod::Dense) {
        s.by_dense(grad, dense_part);
    } else {
        ++s.stats.allgather_steps;
    }
}

void SparseGradientSync::State::gathered(SparseRows& grad, std::span<float> dense_part) {
    const int world = comm.size();
    const size_t w = static_cast<size_t>(width), nd = dense_part.size();
    // Owner updates: the slot's header also holds the sizes of the rank's N groups of rows (one per owner).
    const size_t groups = share ? static_cast<size_t>(world) : 0;
    const size_t head = 2 + groups + nd;
    const size_t room = method == SparseSyncMethod::Dense ? 0 : capacity;
    const size_t slot = head + room * (1 + w);
    const size_t mine = grad.rows.size(), fit = std::min(mine, room);
    send.resize(slot);
    put2(send.data(), static_cast<uint64_t>(mine));
    std::copy(dense_part.begin(), dense_part.end(), send.begin() + 2 + static_cast<std::ptrdiff_t>(groups));
    // What the slots carry: the rows as they are, or grouped by owner (the dense way sends no rows).
    const SparseRows& out = share && method != SparseSyncMethod::Dense ? group_by_owner(grad, send.data() + 2) : grad;
    float* ids = send.data() + head;
    for (size_t i = 0; i < fit; ++i) ids[i] = id_as_float(out.rows[i]);
    std::copy_n(out.values.data(), fit * w, ids + room);
    slot_counts.assign(static_cast<size_t>(world), slot);
    all.resize(slot * static_cast<size_t>(world));
    comm.allgatherv_into_while(send, slot_counts, all, idle);  // every rank passes the same slot size

    counts.resize(static_cast<size_t>(world));
    int64_t largest = 0;
    for (int r = 0; r < world; ++r) {
        counts[static_cast<size_t>(r)] = static_cast<int64_t>(get2<uint64_t>(all.data() + static_cast<size_t>(r) * slot));
        largest = std::max(largest, counts[static_cast<size_t>(r)]);
    }
    const Choice c = choose(method, counts, num_rows, width);
    if (method != SparseSyncMethod::Dense) {
        // Next step's room: the largest count and a quarter more, up to where gathering N slots would move more
        // than the dense allreduce (A(N slots) = (N-1) * room * (4 + 4w) <= D).
        const Choice dense_at_all = choose(SparseSyncMethod::Dense, counts, num_rows, width);
        const uint64_t cap = dense_at_all.dense_bytes / (static_cast<uint64_t>(world - 1) * (4 + 4 * w));
        capacity = static_cast<size_t>(std::min<uint64_t>(cap, static_cast<uint64_t>(largest + largest / 4 + 64)));
    }
    if (c.method == SparseSyncMethod::Dense) {
        by_dense(grad, dense_part);
        return;
    }
    ++stats.allgather_steps;
    if (share) {
        owned_only = true;
        ++stats.owner_steps;
    }
    stats.bytes_allgather += static_cast<uint64_t>(world - 1) * (mine * (1 + w) + nd) * sizeof(float);

    if (largest > static_cast<int64_t>(room)) {  // the rows past the room, in a second collective
        ++stats.second_collectives;
        tail_counts.resize(static_cast<size_t>(world));
        size_t total = 0;
        for (int r = 0; r < world; ++r) {
            const auto n = static_cast<size_t>(counts[static_cast<size_t>(r)]);
            tail_counts[static_cast<size_t>(r)] = (n > room ? n - room : 0) * (1 + w);
            total += tail_counts[static_cast<size_t>(r)];
        }
        const size_t rest = mine - fit;
        tail_send.resize(rest * (1 + w));
        for (size_t i = 0; i < rest; ++i) tail_send[i] = id_as_float(out.rows[fit + i]);
        std::copy_n(out.values.data() + fit * w, rest * w, tail_send.data() + rest);
        tail_all.resize(total);
        comm.allgatherv_into_while(tail_send, tail_counts, tail_all, idle);
    }
    merge_gathered(grad, dense_part, head, room);
}

// Owner updates: grad's rows grouped by owner into `grouped` (a stable counting sort: each group stays sorted), the
// group sizes written bit-cast to group_sizes[0..N).
const SparseRows& SparseGradientSync::State::group_by_owner(const SparseRows& grad, float* group_sizes) {
    const int world = comm.size();
    const size_t w = static_cast<size_t>(width), n = grad.rows.size();
    row_owner.resize(n);
    group_start.assign(static_cast<size_t>(world) + 1, 0);
    for (size_t i = 0; i < n; ++i) {
        const auto o = static_cast<uint32_t>(SparseGradientSync::owner_of_row(grad.rows[i], world));
        row_owner[i] = o;
        ++group_start[o + 1];
    }
    for (int k = 0; k < world; ++k) {
        group_sizes[k] = std::bit_cast<float>(group_start[static_cast<size_t>(k) + 1]);
        group_start[static_cast<size_t>(k) + 1] += group_start[static_cast<size_t>(k)];
    }
    grouped.width = width;
    grouped.rows.resize(n);
    grouped.values.resize(n * w);
    uint32_t* to_rows = grouped.rows.data();
    float* to_values = grouped.values.data();
    const float* values = grad.values.data();
    for (size_t i = 0; i < n; ++i) {
        const uint32_t at = group_start[row_owner[i]]++;
        to_rows[at] = grad.rows[i];
        if (w == 1)
            to_values[at] = values[i];
        else
            std::copy_n(values + i * w, w, to_values + static_cast<size_t>(at) * w);
    }
    return grouped;
}

// Every rank's rows (from its slot, and its tail when it had one) merged in rank order into `grad`, then divided.
void SparseGradientSync::State::merge_gathered(SparseRows& grad, std::span<float> dense_part, size_t head, size_t room) {
    const int world = comm.size();
    const size_t w = static_cast<size_t>(width), nd = dense_part.size();
    const size_t slot = head + room * (1 + w);
    struct Rows {
        const float* ids;
        const float* values;
        size_t n;
    };
    std::vector<Rows> from(static_cast<size_t>(world));
    staged.resize(static_cast<size_t>(world));
    size_t tail_at = 0;
    for (int r = 0; r < world; ++r) {
        const auto n = static_cast<size_t>(counts[static_cast<size_t>(r)]);
        const float* base = all.data() + static_cast<size_t>(r) * slot + head;
        if (n <= room) {
            from[static_cast<size_t>(r)] = {base, base + room, n};
            continue;
        }
        // Rows past the room: this rank's slot and its tail, staged contiguous for the merge.
        std::vector<float>& st = staged[static_cast<size_t>(r)];
        const size_t rest = n - room;
        const float* tail = tail_all.data() + tail_at;
        tail_at += rest * (1 + w);
        st.resize(n * (1 + w));
        std::copy_n(base, room, st.data());
        std::copy_n(tail, rest, st.data() + room);
        std::copy_n(base + room, room * w, st.data() + n);
        std::copy_n(tail + rest, rest * w, st.data() + n + room * w);
        from[static_cast<size_t>(r)] = {st.data(), st.data() + n, n};
    }
    if (owned_only) {
        // Owner updates: this rank's group of every list (its slot header has the group sizes). A row is in its
        // owner's group in every list, sorted there, so it meets the same ranks' values in the same order as in the
        // whole lists.
        const auto me = static_cast<size_t>(comm.rank());
        for (int r = 0; r < world; ++r) {
            const float* sizes = all.data() + static_cast<size_t>(r) * slot + 2;
            size_t skip = 0;
            for (size_t k = 0; k < me; ++k) skip += std::bit_cast<uint32_t>(sizes[k]);
            Rows& f = from[static_cast<size_t>(r)];
            f = {f.ids + skip, f.values + skip * w, std::bit_cast<uint32_t>(sizes[me])};
        }
    }

    // Rank 0's rows merged with rank 1's, then each further rank's merged into the sum in turn: a row's values are
    // summed in rank order, ((r0 + r1) + r2) + ..., so every rank ends with the same bits. Merge k walks the union so
    // far plus rank k's rows: O(N · union) in all, up to O(N² · rows per rank) when the ranks' rows are disjoint
    // (a pairwise tree in a fixed order would be O(N log N · rows); at the N of this project the sequential merges
    // win on their small constant: a heap over N lists was 10x slower per row at N = 2).
    const float n = static_cast<float>(world);
    const Rows& r0 = from[0];
    const Rows& r1 = from[1];
    merged_rows.resize(r0.n + r1.n);
    merged_values.resize((r0.n + r1.n) * w);
    size_t m = merge_rows(w, r0.ids, r0.values, r0.n, r1.ids, r1.values, r1.n, world == 2 ? n : 1.0f,
                          merged_rows.data(), merged_values.data());
    for (int r = 2; r < world; ++r) {
        const Rows& rb = from[static_cast<size_t>(r)];
        merged_rows2.resize(m + rb.n);
        merged_values2.resize((m + rb.n) * w);
        m = merge_rows(w, merged_rows.data(), merged_values.data(), m, rb.ids, rb.values, rb.n,
                       r == world - 1 ? n : 1.0f, merged_rows2.data(), merged_values2.data());
        merged_rows.swap(merged_rows2);
        merged_values.swap(merged_values2);
    }
    merged_rows.resize(m);
    merged_values.resize(m * w);
    grad.rows.swap(merged_rows);
    grad.values.swap(merged_values);
    for (size_t j = 0; j < nd; ++j) {
        float sum = 0.0f;
        for (int r = 0; r < world; ++r) sum += all[static_cast<size_t>(r) * slot + head - nd + j];
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

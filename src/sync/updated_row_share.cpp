// UpdatedRowShare (see updated_row_share.hpp).
#include "updated_row_share.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

namespace ringtrain::sync {

UpdatedRowShare::UpdatedRowShare(comm::Communicator& comm, int64_t num_rows)
    : comm_(comm),
      max_rows_(static_cast<size_t>(num_rows)) {}

UpdatedRowShare::Sent UpdatedRowShare::share(SparseRows& rows, std::span<double> sums) {
    const int world = comm_.size();
    const auto me = static_cast<size_t>(comm_.rank());
    const auto w = static_cast<size_t>(rows.width);
    const size_t head = 2 + 2 * sums.size();
    const size_t room = room_, slot = head + room * (1 + w);
    const size_t mine = rows.rows.size(), fit = std::min(mine, room);

    send_.resize(slot);
    const auto count = static_cast<uint64_t>(mine);
    std::memcpy(send_.data(), &count, sizeof count);  // bit for bit in two floats
    if (!sums.empty()) std::memcpy(send_.data() + 2, sums.data(), sums.size_bytes());  // (an empty span's data may be null)
    float* ids = send_.data() + head;
    for (size_t i = 0; i < fit; ++i) ids[i] = std::bit_cast<float>(rows.rows[i]);
    std::copy_n(rows.values.data(), fit * w, ids + room);
    slot_counts_.assign(static_cast<size_t>(world), slot);
    all_.resize(slot * static_cast<size_t>(world));
    comm_.allgatherv_into_while(send_, slot_counts_, all_, idle_);

    counts_.resize(static_cast<size_t>(world));
    std::vector<size_t>& counts = counts_;
    size_t largest = 0, total = 0;
    std::fill(sums.begin(), sums.end(), 0.0);
    for (size_t r = 0; r < counts.size(); ++r) {
        for (size_t j = 0; j < sums.size(); ++j) {  // in rank order: the same bits on every rank
            double theirs = 0;
            std::memcpy(&theirs, all_.data() + r * slot + 2 + 2 * j, sizeof theirs);
            sums[j] += theirs;
        }
        uint64_t n = 0;
        std::memcpy(&n, all_.data() + r * slot, sizeof n);
        counts[r] = static_cast<size_t>(n);
        largest = std::max(largest, counts[r]);
        if (r != me) total += counts[r];
    }
    // Next share's room: the largest count and a quarter more (the owners' counts move with the batch's rows).
    room_ = std::min(max_rows_, largest + largest / 4 + 64);

    const bool second = largest > room;
    if (second) {
        tail_counts_.resize(counts.size());
        size_t tail_total = 0;
        for (size_t r = 0; r < counts.size(); ++r) {
            tail_counts_[r] = (counts[r] > room ? counts[r] - room : 0) * (1 + w);
            tail_total += tail_counts_[r];
        }
        const size_t rest = mine - fit;
        tail_send_.resize(rest * (1 + w));
        for (size_t i = 0; i < rest; ++i) tail_send_[i] = std::bit_cast<float>(rows.rows[fit + i]);
        std::copy_n(rows.values.data() + fit * w, rest * w, tail_send_.data() + rest);
        tail_all_.resize(tail_total);
        comm_.allgatherv_into_while(tail_send_, tail_counts_, tail_all_, idle_);
    }

    const Sent sent{static_cast<uint64_t>(world - 1) * mine * (1 + w) * sizeof(float), second};
    // The others' rows, in rank order: each rank's slot part, then its tail part.
    rows.rows.resize(total);
    rows.values.resize(total * w);
    size_t at = 0, tail_at = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
        const size_t n = counts[r], in_slot = std::min(n, room), rest = n - in_slot;
        const float* base = all_.data() + r * slot + head;
        const float* tail = tail_all_.data() + tail_at;
        if (rest > 0) tail_at += rest * (1 + w);
        if (r == me) continue;
        for (size_t i = 0; i < in_slot; ++i) rows.rows[at + i] = std::bit_cast<uint32_t>(base[i]);
        std::copy_n(base + room, in_slot * w, rows.values.data() + at * w);
        for (size_t i = 0; i < rest; ++i) rows.rows[at + in_slot + i] = std::bit_cast<uint32_t>(tail[i]);
        std::copy_n(tail + rest, rest * w, rows.values.data() + (at + in_slot) * w);
        at += n;
    }
    return sent;
}

}  // namespace ringtrain::sync

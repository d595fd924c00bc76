// UpdatedRowShare (private to sync): the owner-update step's second collective (SparseGradientSync's header,
// "Who updates which rows"). Every rank sends a fixed-size slot [row count (2 floats) | the caller's sums (2 floats
// each) | ids (room, bit-cast) | rows (room x width)]; the room follows the largest count seen (the same on every rank: it is computed from the
// gathered counts), capped at the table's row count. Rows past the room go in an allgatherv whose counts the
// slots told everyone. What comes back are the other ranks' rows, in rank order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/sparse_rows.hpp"

namespace ringtrain::sync {

class UpdatedRowShare {
public:
    // num_rows: the table's, which bounds the room.
    UpdatedRowShare(comm::Communicator& comm, int64_t num_rows);

    struct Sent {
        uint64_t payload_bytes;  // (N-1) x this rank's rows x (1 + width) x 4: what its rows cost the others
        bool second_collective;  // some rank's rows did not fit the room
    };
    // rows: in = this rank's, out = every other rank's (same width). sums (the same count on every rank) ride in the
    // same collective and come back summed over the ranks in rank order. Collective.
    Sent share(SparseRows& rows, std::span<double> sums);
    // Work for the wait in the share's gathers (SparseGradientSync::set_idle_work).
    void set_idle_work(std::function<bool()> idle) { idle_ = std::move(idle); }

private:
    comm::Communicator& comm_;
    size_t max_rows_;
    size_t room_ = 0;
    std::function<bool()> idle_;
    std::vector<float> send_, all_, tail_send_, tail_all_;
    std::vector<size_t> slot_counts_, tail_counts_, counts_;
};

}  // namespace ringtrain::sync

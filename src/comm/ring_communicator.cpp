// RingCommunicator: pipelined ring allreduce (reduce-scatter + allgather) and recursive doubling over MPI p2p.
//
// Ring schedule on rank r of N (segments indexed mod N), 2(N−1) steps t:
//   reduce-scatter, t = 0..N−2:  send segment r−t,            receive segment r−t−1 and reduce it into ours
//   allgather,      t = N−1+a:   send segment r+1−a,          receive segment r−a straight into the buffer
// The segment sent at step t+1 is the one received at step t, so the exchange is one stream of chunks: a chunk is
// forwarded as soon as it has been reduced (or received), and the receives run `pipeline_depth` chunks ahead.
// Every rank cuts the buffer identically, so the k-th message from the left matches the k-th receive posted
// (MPI keeps messages between a pair with the same tag and communicator in order); one tag suffices.
//
//   r−1 ──chunks──> r ──chunks──> r+1        (send right, receive from left)
//
// Write-after-send: an allgather receive lands in the region that the reduce-scatter sent at step a. That send is
// waited for before the receive is posted (it has always been issued by then; the receive is not posted early).
#include "ringtrain/comm/ring_communicator.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include "ringtrain/comm/half.hpp"
#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/core/error.hpp"
#include "reduce_kernels.hpp"

namespace ringtrain::comm {

namespace {

constexpr int kTagRing = 11;
constexpr int kTagDoubling = 12;

using detail::reduce_into;
using detail::scale;

template <class W>
MPI_Datatype mpi_type() {
    if constexpr (std::is_same_v<W, float>) return MPI_FLOAT;
    else return MPI_UINT16_T;
}

}  // namespace

RingCommunicator::RingCommunicator(RingOptions options, MPI_Comm parent)
    : MpiCommunicatorBase(parent), options_(options) {
    if (options_.pipeline_depth < 1) throw Error("RingCommunicator: pipeline_depth must be at least 1");
    chunk_bytes_ = std::max<size_t>(options_.chunk_bytes, 1);
    recv_requests_.assign(static_cast<size_t>(options_.pipeline_depth), MPI_REQUEST_NULL);
    // Every rank sees local_size == size or none does, so this collective is entered by all ranks or by none.
    if (options_.shared_memory_max_bytes > 0 && size_ > 1 && local_size_ == size_) {
        std::string why;
        shm_ = SharedMemoryAllreduce::create(comm_, options_.shared_memory_chunk_bytes, &why);
        if (!shm_ && rank_ == 0)
            std::fprintf(stderr, "ringtrain: warning: shared-memory allreduce unavailable (%s); using MPI point-to-point\n",
                         why.c_str());
    }
}

RingOptions ring_backend_defaults() {
    RingOptions o;
    // RINGTRAIN_SHARED_MEMORY=0 keeps single-node jobs on MPI point-to-point (for A/B runs, or a broken /dev/shm).
    const char* env = std::getenv("RINGTRAIN_SHARED_MEMORY");
    const bool off = env && (std::string(env) == "0" || std::string(env) == "off" || std::string(env) == "false");
    o.shared_memory_max_bytes = off ? 0 : kSharedMemoryMaxBytes;
    return o;
}

std::string RingCommunicator::waiting_for() const {
    std::string s;
    if (shm_)
        for (int r : shm_->late_ranks()) {
            if (!s.empty()) s += ", ";
            s += std::to_string(r);
        }
    return s;
}

bool RingCommunicator::use_shared_memory(size_t count) const {
    return shm_ && (size_ > 2 || count <= options_.shared_memory_max_bytes / sizeof(float));
}

void RingCommunicator::shared_memory_allreduce(float* data, size_t count, ReduceOp op, WireFormat wire) {
    uint64_t sent = 0, received = 0;
    shm_->allreduce(data, count, op, wire, sent, received);
    count_bytes(sent, received);
}

void RingCommunicator::allgatherv_into_while(std::span<const float> mine, std::span<const size_t> counts,
                                             std::span<float> out, const std::function<bool()>& idle) {
    const size_t total = check_allgatherv(mine, counts, out);  // the same total on every rank: the same path
    if (total == 0 || !use_shared_memory(total)) return MpiCommunicatorBase::allgatherv_into_while(mine, counts, out, idle);
    uint64_t sent = 0, received = 0;
    shm_->allgatherv(mine.data(), counts, out.data(), idle, sent, received);
    count_bytes(sent, received);
}

void RingCommunicator::allreduce_while(std::span<double> data, ReduceOp op, const std::function<bool()>& idle) {
    if (!shm_ || data.empty() || data.size() > shm_->max_small_doubles())
        return MpiCommunicatorBase::allreduce_while(data, op, idle);
    uint64_t sent = 0, received = 0;
    shm_->allreduce_small(data.data(), data.size(), op == ReduceOp::Average ? ReduceOp::Sum : op, idle, sent, received);
    if (op == ReduceOp::Average)
        for (double& v : data) v /= static_cast<double>(size_);
    count_bytes(sent, received);
}

RingCommunicator::~RingCommunicator() {
    std::free(scratch_.p);
    std::free(wire_.p);
}

void* RingCommunicator::ensure(Buffer& b, size_t bytes) {
    if (bytes <= b.bytes && b.p) return b.p;
    const size_t rounded = std::max<size_t>((bytes + 63) / 64 * 64, 64);
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    std::free(b.p);
    b.p = p;
    b.bytes = rounded;
    return p;
}

RingCommunicator::Path RingCommunicator::choose_path(size_t count) const {
    return use_shared_memory(count) ? Path::SharedMemory : mpi_path(count, size_, options_);
}

RingCommunicator::Path RingCommunicator::mpi_path(size_t count, int world, const RingOptions& options) {
    // By the float32 size for both wire formats, so a 16-bit call moves exactly half the bytes of the Float32 call.
    const size_t bytes = count * sizeof(float);
    const bool fits_int = count <= static_cast<size_t>(INT_MAX);
    if (bytes < options.small_message_bytes && fits_int) return Path::RecursiveDoubling;
    const bool power_of_two = world > 0 && (world & (world - 1)) == 0;
    if (world >= 4 && power_of_two && bytes >= options.small_message_bytes && bytes < options.halving_max_bytes &&
        fits_int)
        return Path::HalvingDoubling;
    return Path::Ring;
}

template <class W>
void RingCommunicator::allreduce_by_path(float* data, size_t count, ReduceOp op, WireFormat wire) {
    switch (choose_path(count)) {
        case Path::SharedMemory: shared_memory_allreduce(data, count, op, wire); break;
        case Path::RecursiveDoubling: recursive_doubling<W>(data, count, op, wire); break;
        case Path::HalvingDoubling: halving_doubling<W>(data, count, op, wire); break;
        case Path::Ring: ring_allreduce<W>(data, count, op, wire); break;
    }
}

void RingCommunicator::allreduce(std::span<float> data, ReduceOp op) {
    const size_t count = data.size();
    if (count == 0) return;  // every rank passes the same count, so every rank returns here: no deadlock
    if (size_ > 1) {
        // Float32: the paths sum, and the average is one scaling at the end.
        const ReduceOp combine = op == ReduceOp::Average ? ReduceOp::Sum : op;
        allreduce_by_path<float>(data.data(), count, combine, WireFormat::Float32);
        if (op == ReduceOp::Average) scale(data.data(), count, 1.0f / static_cast<float>(size_));
    }
}

void RingCommunicator::allreduce(std::span<float> data, ReduceOp op, WireFormat wire) {
    if (wire == WireFormat::Float32) return allreduce(data, op);
    const size_t count = data.size();
    if (count == 0 || size_ == 1) return;  // nothing goes on the wire: the values stay exact
    // 16-bit: each path scales an average itself, before its final rounding.
    allreduce_by_path<uint16_t>(data.data(), count, op, wire);
}

namespace {

// Where each step's chunks lie in the buffer on rank r of N: N segments (the first count % N one element longer),
// each cut into chunks of at most C elements, and the segment each step t sends and receives (file comment).
struct RingGeometry {
    int N = 1, r = 0;
    size_t base = 0, rem = 0, C = 1;
    int steps() const { return 2 * (N - 1); }
    size_t wrap(int k) const { return static_cast<size_t>(((k % N) + N) % N); }
    size_t seg_off(int k) const { const size_t s = wrap(k); return s * base + std::min(s, rem); }
    size_t seg_len(int k) const { return base + (wrap(k) < rem ? 1 : 0); }
    size_t chunks(int k) const { return (seg_len(k) + C - 1) / C; }
    int recv_seg(int t) const { return t < N - 1 ? r - t - 1 : r - (t - (N - 1)); }
    int send_seg(int t) const { return t < N - 1 ? r - t : r + 1 - (t - (N - 1)); }
    bool reducing(int t) const { return t < N - 1; }  // a reduce-scatter step (else allgather)
};

// A position (step, chunk) in the stream of receives, skipping empty segments.
struct RingCursor {
    int t = 0;
    size_t c = 0;
    void normalise(const RingGeometry& g) {
        while (t < g.steps() && c >= g.chunks(g.recv_seg(t))) {
            ++t;
            c = 0;
        }
    }
    void advance(const RingGeometry& g) {
        ++c;
        normalise(g);
    }
    size_t offset(const RingGeometry& g) const { return g.seg_off(g.recv_seg(t)) + c * g.C; }
    size_t length(const RingGeometry& g) const { return std::min(g.C, g.seg_len(g.recv_seg(t)) - c * g.C); }
};

// What a received chunk does to data[0, len). Reduce-scatter steps add the received values in; with a 16-bit wire
// the sum is re-encoded for forwarding and, at the last reduce step (the segment is complete), averaged and rounded
// exactly as every rank will receive it, so all ranks hold the same bits. Allgather steps on a 16-bit wire decode
// what landed in the wire copy; on a float wire it landed in the data already.
template <class W>
void apply_received_chunk(const RingGeometry& g, int t, WireFormat fmt, ReduceOp op, const W* received, float* data,
                          W* wire, size_t len) {
    if constexpr (std::is_same_v<W, uint16_t>) {
        if (!g.reducing(t)) {
            decode16(fmt, wire, data, len);
            return;
        }
        decode16_reduce(fmt, received, data, len, op);
        if (t == g.N - 2) {
            if (op == ReduceOp::Average) scale(data, len, 1.0f / static_cast<float>(g.N));
            encode16(fmt, data, wire, len);
            decode16(fmt, wire, data, len);
        } else {
            encode16(fmt, data, wire, len);
        }
    } else {
        (void)fmt;
        (void)wire;
        if (g.reducing(t)) reduce_into(data, received, len, op);
    }
}

}  // namespace

template <class W>
void RingCommunicator::ring_allreduce(float* data, size_t count, ReduceOp op, WireFormat fmt) {
    const MPI_Datatype type = mpi_type<W>();
    RingGeometry g;
    g.N = size_;
    g.r = rank_;
    g.base = count / static_cast<size_t>(size_);
    g.rem = count % static_cast<size_t>(size_);
    g.C = std::clamp<size_t>(chunk_bytes_ / sizeof(W), 1, static_cast<size_t>(INT_MAX));
    const int steps = g.steps(), right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
    const size_t D = static_cast<size_t>(options_.pipeline_depth);
    // 16-bit: the wire copy of the data; float: the data itself.
    W* wire = nullptr;
    if constexpr (std::is_same_v<W, uint16_t>) wire = static_cast<W*>(ensure(wire_, count * sizeof(W)));
    else wire = data;

    // Send indices: step 0 sends segment r; step t > 0 forwards what step t−1 received, in chunk order.
    send_step_base_.resize(static_cast<size_t>(steps) + 1);
    size_t total_sends = 0, total_recvs = 0;
    for (int t = 0; t < steps; ++t) {
        send_step_base_[t] = total_sends;
        total_sends += g.chunks(g.send_seg(t));
        total_recvs += g.chunks(g.recv_seg(t));
    }
    send_step_base_[steps] = total_sends;
    send_requests_.assign(total_sends, MPI_REQUEST_NULL);  // keeps capacity: no allocation once grown
    size_t sends_issued = 0;

    const size_t slot_elems = std::min(g.C, g.base + (g.rem ? 1 : 0));  // no receive is longer than this
    W* scratch = static_cast<W*>(ensure(scratch_, D * slot_elems * sizeof(W)));
    uint64_t sent_elems = 0, received_elems = 0;

    auto isend = [&](size_t index, const W* p, size_t len) {
        check_mpi(MPI_Isend(p, static_cast<int>(len), type, right, kTagRing, comm_, &send_requests_[index]), "MPI_Isend");
        sent_elems += len;
        ++sends_issued;
    };

    // Step 0: send all of our own segment.
    {
        const size_t off = g.seg_off(rank_), len = g.seg_len(rank_);
        if constexpr (std::is_same_v<W, uint16_t>) encode16(fmt, data + off, wire + off, len);
        for (size_t c = 0; c * g.C < len; ++c)
            isend(send_step_base_[0] + c, wire + off + c * g.C, std::min(g.C, len - c * g.C));
    }

    RingCursor post, proc;
    post.normalise(g);
    proc.normalise(g);
    size_t posted = 0, processed = 0;

    // Posts the next receive if its slot is free and, for an allgather receive, the reduce-scatter send out of the
    // same region has been issued (it is then waited for). Returns false when nothing could be posted.
    auto try_post = [&]() -> bool {
        if (posted >= total_recvs || posted >= processed + D) return false;
        const size_t slot = posted % D;
        W* dst = nullptr;
        if (g.reducing(post.t)) {
            dst = scratch + slot * slot_elems;
        } else {
            const size_t hazard = send_step_base_[post.t - (g.N - 1)] + post.c;
            if (hazard >= sends_issued) return false;
            check_mpi(MPI_Wait(&send_requests_[hazard], MPI_STATUS_IGNORE), "MPI_Wait");
            dst = wire + post.offset(g);
        }
        check_mpi(MPI_Irecv(dst, static_cast<int>(post.length(g)), type, left, kTagRing, comm_, &recv_requests_[slot]),
                  "MPI_Irecv");
        ++posted;
        post.advance(g);
        return true;
    };

    while (try_post()) {
    }
    while (processed < total_recvs) {
        if (processed == posted) {  // cannot happen (the hazard send is issued before its receive is due); be safe
            throw Error("ring allreduce: internal schedule error (receive not posted)");
        }
        const size_t slot = processed % D;
        check_mpi(MPI_Wait(&recv_requests_[slot], MPI_STATUS_IGNORE), "MPI_Wait");
        const size_t off = proc.offset(g), len = proc.length(g);
        received_elems += len;
        apply_received_chunk<W>(g, proc.t, fmt, op, scratch + slot * slot_elems, data + off, wire + off, len);
        ++processed;
        if (proc.t + 1 < steps) isend(send_step_base_[proc.t + 1] + proc.c, wire + off, len);
        while (try_post()) {
        }
        proc.advance(g);
    }
    check_mpi(MPI_Waitall(static_cast<int>(total_sends), send_requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    count_bytes(sent_elems * sizeof(W), received_elems * sizeof(W));
}

template <class W>
void RingCommunicator::exchange(const W* send, int dest, W* recv, int source, size_t count) {
    const MPI_Datatype type = mpi_type<W>();
    // Pieces of at most small_piece_bytes, all posted at once: under the MPI library's eager limit each piece goes
    // out without a rendezvous handshake, which is what dominates small-message latency.
    const size_t piece = std::clamp<size_t>(options_.small_piece_bytes / sizeof(W), 1, static_cast<size_t>(INT_MAX));
    const size_t pieces = (count + piece - 1) / piece;
    if (pieces == 1) {  // one message each way: the plain blocking calls have the least overhead
        const int n = static_cast<int>(count);
        if (send && recv)
            check_mpi(MPI_Sendrecv(send, n, type, dest, kTagDoubling, recv, n, type, source, kTagDoubling, comm_,
                                   MPI_STATUS_IGNORE),
                      "MPI_Sendrecv");
        else if (send)
            check_mpi(MPI_Send(send, n, type, dest, kTagDoubling, comm_), "MPI_Send");
        else
            check_mpi(MPI_Recv(recv, n, type, source, kTagDoubling, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
        count_bytes(send ? count * sizeof(W) : 0, recv ? count * sizeof(W) : 0);
        return;
    }
    size_t k = 0;
    small_requests_.resize(2 * pieces);
    if (recv)
        for (size_t off = 0; off < count; off += piece)
            check_mpi(MPI_Irecv(recv + off, static_cast<int>(std::min(piece, count - off)), type, source, kTagDoubling,
                                comm_, &small_requests_[k++]),
                      "MPI_Irecv");
    if (send)
        for (size_t off = 0; off < count; off += piece)
            check_mpi(MPI_Isend(send + off, static_cast<int>(std::min(piece, count - off)), type, dest, kTagDoubling,
                                comm_, &small_requests_[k++]),
                      "MPI_Isend");
    check_mpi(MPI_Waitall(static_cast<int>(k), small_requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    count_bytes(send ? count * sizeof(W) : 0, recv ? count * sizeof(W) : 0);
}


template <class W>
void RingCommunicator::halving_doubling(float* data, size_t count, ReduceOp op, WireFormat fmt) {
    // W = float: messages are the data itself, and the caller scales an average. W = uint16_t: what goes out is
    // encoded into `wire_`, what comes in is decoded and added in fp32, and the owner scales and rounds its finished
    // block to 16 bits before the allgather; every message is exactly half the float32 one, so the byte counters halve.
    constexpr bool k16 = std::is_same_v<W, uint16_t>;
    const MPI_Datatype type = mpi_type<W>();
    const int r = rank_;
    W* tmp = static_cast<W*>(ensure(scratch_, (count / 2 + 1) * sizeof(W)));
    W* out = reinterpret_cast<W*>(data);  // what is sent: the data (float) or its 16-bit copy
    if constexpr (k16) out = static_cast<W*>(ensure(wire_, count * sizeof(W)));
    // Reduce-scatter by recursive halving: at distance d the pair (r, r^d) holds the same range [lo, hi) (their
    // earlier choices were the same); the lower rank keeps the lower half, sends the upper, and vice versa.
    struct Range {
        size_t lo, hi;
        size_t size() const { return hi - lo; }
    };
    Range given[32];  // the half handed away at each level, for the allgather to take back
    int levels = 0;
    size_t lo = 0, hi = count;
    for (int d = size_ / 2; d >= 1; d /= 2, ++levels) {
        const int peer = r ^ d;
        const size_t mid = lo + (hi - lo) / 2;
        const bool keep_low = (r & d) == 0;
        const Range keep = keep_low ? Range{lo, mid} : Range{mid, hi};
        const Range away = keep_low ? Range{mid, hi} : Range{lo, mid};
        if constexpr (k16) encode16(fmt, data + away.lo, out + away.lo, away.size());
        check_mpi(MPI_Sendrecv(out + away.lo, static_cast<int>(away.size()), type, peer, kTagDoubling, tmp,
                               static_cast<int>(keep.size()), type, peer, kTagDoubling, comm_, MPI_STATUS_IGNORE),
                  "MPI_Sendrecv");
        count_bytes(away.size() * sizeof(W), keep.size() * sizeof(W));
        if constexpr (k16) decode16_reduce(fmt, tmp, data + keep.lo, keep.size(), op);
        else reduce_into(data + keep.lo, tmp, keep.size(), op);
        given[levels] = away;
        lo = keep.lo;
        hi = keep.hi;
    }
    // Rank r now owns the complete result of [lo, hi); nobody else computed it, so every rank ends with the same bits.
    if constexpr (k16) {
        if (op == ReduceOp::Average) scale(data + lo, hi - lo, 1.0f / static_cast<float>(size_));
        encode16(fmt, data + lo, out + lo, hi - lo);
        decode16(fmt, out + lo, data + lo, hi - lo);
    }
    // Allgather by recursive doubling, the levels in reverse: send what I hold, receive the half I gave away.
    for (int level = levels - 1, d = 1; level >= 0; --level, d *= 2) {
        const int peer = r ^ d;
        const Range back = given[level];
        check_mpi(MPI_Sendrecv(out + lo, static_cast<int>(hi - lo), type, peer, kTagDoubling, out + back.lo,
                               static_cast<int>(back.size()), type, peer, kTagDoubling, comm_, MPI_STATUS_IGNORE),
                  "MPI_Sendrecv");
        count_bytes((hi - lo) * sizeof(W), back.size() * sizeof(W));
        if constexpr (k16) decode16(fmt, out + back.lo, data + back.lo, back.size());
        lo = std::min(lo, back.lo);
        hi = std::max(hi, back.hi);
    }
}

template <class W>
void RingCommunicator::recursive_doubling(float* data, size_t count, ReduceOp op, WireFormat fmt) {
    // W = float: messages are the data itself, and the caller scales an average. W = uint16_t: before each exchange
    // a rank rounds its current values to 16 bits in place and sends their encoding from `wire_`; both partners then
    // add the same two 16-bit values in fp32, so they stay bitwise identical; the result is scaled and rounded last.
    constexpr bool k16 = std::is_same_v<W, uint16_t>;
    const int N = size_, r = rank_;
    int P = 1;
    while (P * 2 <= N) P *= 2;
    const int extra = N - P;  // ranks 0..2·extra−1 pair up: even ones hand their data to the odd one and wait
    W* tmp = static_cast<W*>(ensure(scratch_, count * sizeof(W)));
    W* out = reinterpret_cast<W*>(data);  // what is sent: the data (float) or its 16-bit copy
    if constexpr (k16) out = static_cast<W*>(ensure(wire_, count * sizeof(W)));
    auto prepare_send = [&] {
        if constexpr (k16) {
            encode16(fmt, data, out, count);
            decode16(fmt, out, data, count);
        }
    };
    // a+b == b+a in IEEE arithmetic, so both partners hold bitwise identical results after every round.
    auto add_received = [&] {
        if constexpr (k16) decode16_reduce(fmt, tmp, data, count, op);
        else reduce_into(data, tmp, count, op);
    };

    int vrank;  // rank inside the power-of-two group, or −1 while folded out
    if (r < 2 * extra) {
        if (r % 2 == 0) {
            prepare_send();
            exchange<W>(out, r + 1, nullptr, -1, count);
            vrank = -1;
        } else {
            exchange<W>(nullptr, -1, tmp, r - 1, count);
            prepare_send();
            add_received();
            vrank = r / 2;
        }
    } else {
        vrank = r - extra;
    }

    if (vrank >= 0) {
        for (int mask = 1; mask < P; mask <<= 1) {
            const int vpeer = vrank ^ mask;
            const int peer = vpeer < extra ? vpeer * 2 + 1 : vpeer + extra;
            prepare_send();
            exchange<W>(out, peer, tmp, peer, count);
            add_received();
        }
        if constexpr (k16) {
            if (op == ReduceOp::Average) scale(data, count, 1.0f / static_cast<float>(N));
            prepare_send();  // the result every rank ends with: 16-bit values
        }
    }

    if (r < 2 * extra) {
        if (r % 2 == 1) {
            exchange<W>(out, r - 1, nullptr, -1, count);
        } else {
            exchange<W>(nullptr, -1, out, r + 1, count);
            if constexpr (k16) decode16(fmt, out, data, count);
        }
    }
}

}  // namespace ringtrain::comm

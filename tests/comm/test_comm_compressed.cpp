// Compressed (fp16 / bf16 on the wire) allreduce on every backend and path, at 1–4 ranks.
//
// Error bound. Let u be the unit roundoff of the 16-bit format (fp16: 2^-11, bf16: 2^-8) and S = Σ|x_i| over the
// ranks. A value is rounded to 16 bits each time it goes on the wire and once at the end; each rounding of a partial
// result v adds at most u·|v| + η (η = 2^-25, half the smallest fp16 subnormal; 0 for bf16's float range), and
// |v| <= S. The ring rounds an element at most N times (N−1 hops of partial sums, then the finished value), recursive
// doubling at most log2(N)+3 times (input, each round, the fold, the result), MPI's reduction tree at most N+1.
// So |got − exact| <= (N+3)·(u·S + η) plus the float32 additions ((N−1)·2^-24·S, doubled for slack). Average: the
// same divided by N, plus one float32 rounding of the scaling.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/half.hpp"
#include "ringtrain/comm/mpi_communicator.hpp"
#include "ringtrain/comm/ring_communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/rng.hpp"
#include "serial_reference.hpp"

using namespace ringtrain;
using namespace ringtrain::comm;
using namespace rt_test;

namespace {


double unit_roundoff(WireFormat w) { return w == WireFormat::Float16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8); }
double abs_floor(WireFormat w) { return w == WireFormat::Float16 ? std::ldexp(1.0, -25) : 0.0; }

double compressed_tolerance(WireFormat w, double sum_abs, int n) {
    return (n + 3) * (unit_roundoff(w) * sum_abs + abs_floor(w)) + 2.0 * std::max(n - 1, 1) * std::ldexp(sum_abs, -24);
}

float round16(WireFormat w, float x) {
    return w == WireFormat::Float16 ? half_to_float(float_to_half(x)) : bfloat16_to_float(float_to_bfloat16(x));
}

uint64_t fnv1a(std::span<const float> v) {
    uint64_t h = 1469598103934665603ull;
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t i = 0; i < v.size_bytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

bool same_on_all_ranks(Communicator& comm, std::span<const float> v) {
    const std::vector<uint64_t> h = comm.allgather(fnv1a(v));
    return std::all_of(h.begin(), h.end(), [&](uint64_t x) { return x == h[0]; });
}

struct Variant {
    const char* name;
    std::unique_ptr<Communicator> comm;
};

std::vector<Variant> all_variants() {
    std::vector<Variant> v;
    v.push_back({"mpi", std::make_unique<MpiCommunicator>()});
    v.push_back({"ring default", std::make_unique<RingCommunicator>()});
    // Ring only (no halving-doubling), with small chunks; the halving variant below covers the other path.
    v.push_back({"ring only, 16 KB chunks", std::make_unique<RingCommunicator>(RingOptions{0, 16 * 1024, 3, 4000, 0})});
    v.push_back({"ring only, 6-byte chunks, depth 2", std::make_unique<RingCommunicator>(RingOptions{0, 6, 2, 4000, 0})});
    // Recursive halving + doubling at every size where the world is a power of two of at least 4.
    v.push_back({"halving-doubling", std::make_unique<RingCommunicator>(
                                         RingOptions{0, 1 << 20, 4, 4000, std::numeric_limits<size_t>::max()})});
    v.push_back({"recursive doubling", std::make_unique<RingCommunicator>(
                                           RingOptions{std::numeric_limits<size_t>::max(), 1 << 20, 4, 1 << 20})});
    v.push_back({"recursive doubling, 10-byte pieces", std::make_unique<RingCommunicator>(
                                                           RingOptions{std::numeric_limits<size_t>::max(), 1 << 20, 4, 10})});
    v.push_back({"shared memory", std::make_unique<RingCommunicator>(ring_backend_defaults())});
    RingOptions tiny = ring_backend_defaults();
    tiny.shared_memory_chunk_bytes = 12;
    v.push_back({"shared memory, 12-byte chunks", std::make_unique<RingCommunicator>(tiny)});
    return v;
}

std::vector<size_t> test_counts() {
    const size_t n = static_cast<size_t>(world_size());
    std::vector<size_t> c = {0, 1, n - 1, n + 1, 13, 10007, (size_t{1} << 20) + 3};
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
    return c;
}

}  // namespace

TEST_CASE("fp16/bf16 allreduce is within the rounding bound of the exact result and halves the bytes",
          "[comm][allreduce][compression]") {
    const int n = world_size();
    auto variants = all_variants();
    MpiCommunicator check_comm;
    uint64_t seed = 500;
    for (size_t count : test_counts()) {
        const Reference ref = make_reference(count, seed++);
        for (auto& v : variants) {
            const std::string name = v.name;
            const bool slow = name.find("-byte") != std::string::npos;
            // Tiny chunks/pieces: correctness at small counts is enough (shared memory: two barriers per 3 floats).
            if (slow && count > (name.rfind("shared memory", 0) == 0 ? 2000u : 20000u)) continue;
            for (WireFormat w : {WireFormat::Float16, WireFormat::BFloat16}) {
                for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
                    // The Float32 call on the same communicator, for the byte counts.
                    std::vector<float> full = ref.mine;
                    const uint64_t s0 = v.comm->bytes_sent(), r0 = v.comm->bytes_received();
                    v.comm->allreduce(full, op, WireFormat::Float32);
                    const uint64_t s32 = v.comm->bytes_sent() - s0, r32 = v.comm->bytes_received() - r0;

                    std::vector<float> buf = ref.mine;
                    const uint64_t s1 = v.comm->bytes_sent(), r1 = v.comm->bytes_received();
                    v.comm->allreduce(buf, op, w);
                    const uint64_t s16 = v.comm->bytes_sent() - s1, r16 = v.comm->bytes_received() - r1;

                    size_t bad = 0, not16 = 0, first = 0;
                    double got_first = 0, want_first = 0;
                    for (size_t i = 0; i < count; ++i) {
                        double want = ref.sum[i], tol = compressed_tolerance(w, ref.sum_abs[i], n);
                        if (op == ReduceOp::Average) {
                            want /= n;
                            tol = tol / n + std::ldexp(std::fabs(want), -23);
                        }
                        if (n == 1) tol = 0;  // nothing on the wire: exact
                        if (!(std::fabs(buf[i] - want) <= tol) && bad++ == 0) first = i, got_first = buf[i], want_first = want;
                        // Every value that travelled is a 16-bit value (MPI scales after decoding, so only Sum).
                        const bool expect16 = n > 1 && (op == ReduceOp::Sum || name != "mpi");
                        if (expect16 && round16(w, buf[i]) != buf[i]) ++not16;
                    }
                    INFO(name << " " << wire_format_name(w) << " op " << static_cast<int>(op) << " count " << count
                              << ": first bad " << first << " got " << got_first << " want " << want_first);
                    CHECK(bad == 0);
                    CHECK(not16 == 0);
                    CHECK(same_on_all_ranks(check_comm, buf));
                    // Bytes: exactly half of the Float32 call's (0 on one rank or for an empty buffer).
                    CHECK(2 * s16 == s32);
                    CHECK(2 * r16 == r32);
                    if (n > 1 && count >= static_cast<size_t>(n)) CHECK(s16 > 0);
                }
            }
        }
    }
}

TEST_CASE("fp16/bf16 allreduce Max/Min give the 16-bit rounding of the exact extreme", "[comm][allreduce][compression]") {
    const int n = world_size();
    auto variants = all_variants();
    for (size_t count : {size_t{1}, size_t{101}, size_t{70001}}) {
        const Reference ref = make_reference(count, 900 + count);
        for (auto& v : variants) {
            if (std::string(v.name) == "shared memory, 12-byte chunks" && count > 2000) continue;  // two barriers per 3 floats
            for (WireFormat w : {WireFormat::Float16, WireFormat::BFloat16}) {
                std::vector<float> mx = ref.mine, mn = ref.mine;
                v.comm->allreduce(mx, ReduceOp::Max, w);
                v.comm->allreduce(mn, ReduceOp::Min, w);
                size_t bad = 0;
                for (size_t i = 0; i < count; ++i) {
                    const float want_max = n == 1 ? ref.max[i] : round16(w, ref.max[i]);
                    const float want_min = n == 1 ? ref.min[i] : round16(w, ref.min[i]);
                    bad += mx[i] != want_max;
                    bad += mn[i] != want_min;
                }
                INFO(v.name << " " << wire_format_name(w) << " count " << count);
                CHECK(bad == 0);
            }
        }
    }
}

TEST_CASE("compressed allreduce keeps results deterministic and repeated calls reuse buffers",
          "[comm][allreduce][compression]") {
    const int me = world_rank();
    RingCommunicator ring;
    // Grow, shrink, grow: the wire and scratch buffers are reused.
    for (size_t count : {size_t{300000}, size_t{17}, size_t{300000}, size_t{5000}}) {
        const std::vector<float> x = rank_data(count, me, count);
        std::vector<float> a = x, b = x;
        ring.allreduce(a, ReduceOp::Average, WireFormat::Float16);
        ring.allreduce(b, ReduceOp::Average, WireFormat::Float16);
        CHECK(fnv1a(a) == fnv1a(b));
    }
    // Float32 through the three-argument call is the plain call, bitwise.
    const std::vector<float> x = rank_data(4099, me, 3);
    std::vector<float> a = x, b = x;
    ring.allreduce(a, ReduceOp::Sum);
    ring.allreduce(b, ReduceOp::Sum, WireFormat::Float32);
    CHECK(fnv1a(a) == fnv1a(b));
}

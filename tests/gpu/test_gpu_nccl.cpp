// NCCL collectives on device buffers (N = 1 on one GPU; N > 1 only when every rank has its own GPU), the
// Communicator interface on host spans (staged through pinned memory), and GradientSync's device path (fusion arena
// on the GPU, collectives on the NCCL stream; at N = 1 through SyncOptions::reduce_single_rank).
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <set>
#include <vector>

#include "ringtrain/comm/half.hpp"
#include "ringtrain/comm/nccl_communicator.hpp"
#include "ringtrain/core/memory.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/core/tensor.hpp"
#include "ringtrain/nn/layer.hpp"
#include "ringtrain/sync/gradient_sync.hpp"

using namespace ringtrain;
using comm::NcclCommunicator;
using comm::ReduceOp;
using comm::WireFormat;
using sync::GradientSync;
using sync::SyncOptions;

namespace {
float value(int rank, size_t i) { return static_cast<float>((rank + 1) * 0.5 + static_cast<double>(i % 97)); }

// Parameters on the GPU, with sizes whose tails the conversion kernels and NCCL must get right (1, 7, an odd
// million) between ordinary ones.
struct GpuParams {
    std::vector<std::unique_ptr<nn::Parameter>> owned;
    std::vector<nn::Parameter*> ptrs;
    explicit GpuParams(const std::vector<int64_t>& sizes = {1, 300, 7, 1000003, 64, 4096, 1}) {
        for (size_t i = 0; i < sizes.size(); ++i) {
            auto p = std::make_unique<nn::Parameter>();
            p->name = std::to_string(i);
            p->name.insert(p->name.begin(), 'p');  // not "p" + ...: GCC 12 warns falsely (-Wrestrict) there
            p->value = Tensor::zeros({sizes[i]}, Device::CUDA);
            p->grad = Tensor::zeros({sizes[i]}, Device::CUDA);
            ptrs.push_back(p.get());
            owned.push_back(std::move(p));
        }
    }
};

// The gradient of parameter i that rank r holds at step s: every rank can make every rank's, so each knows the mean.
std::vector<float> grad_of(size_t count, int rank, int step, size_t i) {
    Rng rng(1000003u * static_cast<uint64_t>(step + 1) + 7919u * i + 31u * static_cast<uint64_t>(rank) + 5);
    std::vector<float> v(count);
    for (auto& x : v) x = rng.normal() * 0.01f;
    return v;
}

void set_grads(GpuParams& ps, int rank, int step) {
    for (size_t i = 0; i < ps.ptrs.size(); ++i) {
        Tensor& g = ps.ptrs[i]->grad;
        const std::vector<float> v = grad_of(static_cast<size_t>(g.numel()), rank, step, i);
        copy_floats(g.data(), Device::CUDA, v.data(), Device::CPU, v.size());
    }
}

std::vector<float> host_grad(const nn::Parameter& p) {
    std::vector<float> v(static_cast<size_t>(p.grad.numel()));
    copy_floats(v.data(), Device::CPU, p.grad.data(), Device::CUDA, v.size());  // ordered after the default stream
    return v;
}

// One backward as the trainer drives it: last parameter first, except that `skip` is not reported (synchronize()
// packs it) and `forward_order` reports first parameter first (buckets then fill out of order).
void run_step(GradientSync& gs, GpuParams& ps, int rank, int step, const std::set<size_t>& skip = {},
              bool forward_order = false) {
    set_grads(ps, rank, step);
    gs.begin_step(step);
    const size_t n = ps.ptrs.size();
    for (size_t j = 0; j < n; ++j) {
        const size_t k = forward_order ? j : n - 1 - j;
        if (!skip.count(k)) gs.on_gradient_ready(*ps.ptrs[k]);
    }
    gs.synchronize();
}

double rounded16(WireFormat w, float x) {
    if (w == WireFormat::Float16) return comm::half_to_float(comm::float_to_half(x));
    if (w == WireFormat::BFloat16) return comm::bfloat16_to_float(comm::float_to_bfloat16(x));
    return x;
}

// Every gradient is the average over the ranks of step `step`'s gradients: at one rank exactly the input (float32) or
// its 16-bit rounding (half.hpp's, round to nearest even); at N ranks within the rounding error of N partial sums.
void check_average(GpuParams& ps, int size, int step, WireFormat w) {
    const double u = w == WireFormat::Float32 ? 0x1p-24 : w == WireFormat::Float16 ? 0x1p-11 : 0x1p-8;
    const double tiny = w == WireFormat::Float16 ? 0x1p-24 * size : 1e-30;  // fp16 subnormal spacing
    for (size_t i = 0; i < ps.ptrs.size(); ++i) {
        const std::vector<float> got = host_grad(*ps.ptrs[i]);
        std::vector<std::vector<float>> all;
        for (int r = 0; r < size; ++r) all.push_back(grad_of(got.size(), r, step, i));
        size_t bad = 0;
        for (size_t e = 0; e < got.size(); ++e) {
            if (size == 1) {
                if (static_cast<double>(got[e]) != rounded16(w, all[0][e])) ++bad;
                continue;
            }
            double sum = 0, abs_sum = 0;
            for (int r = 0; r < size; ++r) sum += all[r][e], abs_sum += std::fabs(all[r][e]);
            const double mean = sum / size;
            const double tol = 2.0 * u * size * (abs_sum / size + std::fabs(mean)) + tiny;
            if (std::fabs(got[e] - mean) > tol) ++bad;
        }
        INFO("parameter " << i << " (" << got.size() << " elements), step " << step << ", wire "
                          << comm::wire_format_name(w));
        REQUIRE(bad == 0);
    }
}

// What a ring allreduce of every bucket moves, `steps` times (NcclCommunicator counts the ring convention).
comm::ByteCount expected_bytes(const GradientSync& gs, WireFormat w, int steps, int rank, int size) {
    comm::ByteCount total;
    for (const sync::BucketStat& b : gs.stats().buckets) {
        const comm::ByteCount one = comm::ring_allreduce_bytes(b.bytes / sizeof(float), comm::wire_element_size(w), rank, size);
        total.sent += one.sent * static_cast<uint64_t>(steps);
        total.received += one.received * static_cast<uint64_t>(steps);
    }
    return total;
}

SyncOptions device_options(size_t fusion_bytes, bool overlap, WireFormat w = WireFormat::Float32) {
    SyncOptions o;
    o.fusion_bytes = fusion_bytes;
    o.overlap = overlap;
    o.wire = w;
    o.reduce_single_rank = true;  // one GPU can only run N = 1: still go through NCCL
    return o;
}
}  // namespace

TEST_CASE("nccl allreduce, broadcast and allgather on device buffers", "[gpu][nccl]") {
    NcclCommunicator c;
    const int R = c.size(), me = c.rank();
    REQUIRE(c.backend() == "nccl");
    for (size_t n : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
        Tensor host({static_cast<int64_t>(n)});
        for (size_t i = 0; i < n; ++i) host.data()[i] = value(me, i);
        Tensor dev(host.shape(), Device::CUDA);
        dev.copy_from(host);
        c.allreduce_device(dev.data(), n, ReduceOp::Sum);
        Tensor back(host.shape());
        back.copy_from(dev);  // ordered after the collective (default stream waits for the NCCL stream)
        for (size_t i = 0; i < n; ++i) {
            float expect = 0.0f;
            for (int r = 0; r < R; ++r) expect += value(r, i);
            REQUIRE(back.data()[i] == Approx(expect).epsilon(1e-6));
        }
        dev.copy_from(host);
        c.allreduce_device(dev.data(), n, ReduceOp::Average);
        c.synchronize();
        back.copy_from(dev);
        for (size_t i = 0; i < n; i += 101) {
            float expect = 0.0f;
            for (int r = 0; r < R; ++r) expect += value(r, i);
            REQUIRE(back.data()[i] == Approx(expect / R).epsilon(1e-6));
        }
        dev.copy_from(host);
        c.allreduce_device(dev.data(), n, ReduceOp::Max);
        back.copy_from(dev);
        REQUIRE(back.data()[n - 1] == value(R - 1, n - 1));
    }
    // broadcast from the last rank
    Tensor b = Tensor::filled({4096}, static_cast<float>(me), Device::CUDA);
    c.broadcast_device(b.data(), 4096, R - 1);
    Tensor bh({4096});
    bh.copy_from(b);
    for (float v : bh.span()) REQUIRE(v == static_cast<float>(R - 1));
    // allgather
    Tensor mine = Tensor::filled({300}, static_cast<float>(me + 1), Device::CUDA);
    Tensor all({300 * static_cast<int64_t>(R)}, Device::CUDA);
    c.allgather_device(mine.data(), all.data(), 300);
    Tensor ah(all.shape());
    ah.copy_from(all);
    for (int r = 0; r < R; ++r) REQUIRE(ah.data()[r * 300 + 299] == static_cast<float>(r + 1));
    REQUIRE(c.bytes_sent() > 0);
}

TEST_CASE("nccl communicator on host spans (staged through pinned memory)", "[gpu][nccl]") {
    NcclCommunicator c;
    const int R = c.size(), me = c.rank();
    std::vector<float> v(12345);
    for (size_t i = 0; i < v.size(); ++i) v[i] = value(me, i);
    c.allreduce(std::span<float>(v), ReduceOp::Sum);
    for (size_t i = 0; i < v.size(); i += 17) {
        float expect = 0.0f;
        for (int r = 0; r < R; ++r) expect += value(r, i);
        REQUIRE(v[i] == Approx(expect).epsilon(1e-6));
    }
    std::vector<float> b(100, static_cast<float>(me));
    c.broadcast(std::span<float>(b), 0);
    for (float x : b) REQUIRE(x == 0.0f);
    std::vector<float> mine(static_cast<size_t>(me + 1), static_cast<float>(me));  // counts differ per rank
    const std::vector<float> all = c.allgather(std::span<const float>(mine));
    REQUIRE(all.size() == static_cast<size_t>(R * (R + 1) / 2));
    size_t at = 0;
    for (int r = 0; r < R; ++r)
        for (int k = 0; k <= r; ++k) REQUIRE(all[at++] == static_cast<float>(r));
    std::vector<double> d{1.0, 2.0};
    c.allreduce(std::span<double>(d), ReduceOp::Sum);
    REQUIRE(d[1] == 2.0 * R);
    c.barrier();
    const auto made = comm::make_nccl_communicator();
    REQUIRE(made->backend() == "nccl");
}

TEST_CASE("nccl allreduce_device_async: float32 and 16-bit wire formats, ring byte counts", "[gpu][nccl]") {
    NcclCommunicator c;
    const int R = c.size(), me = c.rank();
    for (size_t n : {size_t{1}, size_t{7}, size_t{1000003}}) {
        // Small integers: exact in fp16 and bf16 (and their sums at these world sizes), so every format is exact.
        std::vector<float> host(n);
        for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(me + 1 + static_cast<int>(i % 7));
        Tensor dev({static_cast<int64_t>(n)}, Device::CUDA);
        const std::shared_ptr<float> wire = allocate_floats(n / 2 + 1, Device::CUDA);
        for (WireFormat w : {WireFormat::Float32, WireFormat::Float16, WireFormat::BFloat16}) {
            copy_floats(dev.data(), Device::CUDA, host.data(), Device::CPU, n);
            const uint64_t sent0 = c.bytes_sent(), received0 = c.bytes_received();
            // The async call orders nothing itself: make the NCCL stream wait for the copy, the host for the result.
            cuda_synchronize();
            c.allreduce_device_async(dev.data(), n, ReduceOp::Sum, w, wire.get());
            c.synchronize();
            std::vector<float> back(n);
            copy_floats(back.data(), Device::CPU, dev.data(), Device::CUDA, n);
            size_t bad = 0;
            for (size_t i = 0; i < n; ++i) {
                float expect = 0.0f;
                for (int r = 0; r < R; ++r) expect += static_cast<float>(r + 1 + static_cast<int>(i % 7));
                if (back[i] != expect) ++bad;
            }
            INFO(n << " elements, wire " << comm::wire_format_name(w));
            REQUIRE(bad == 0);
            const comm::ByteCount b = comm::ring_allreduce_bytes(n, comm::wire_element_size(w), me, R);
            REQUIRE(c.bytes_sent() - sent0 == b.sent);
            REQUIRE(c.bytes_received() - received0 == b.received);
        }
        CHECK_THROWS_AS(c.allreduce_device_async(dev.data(), n, ReduceOp::Sum, WireFormat::Float16, nullptr), Error);
    }
    c.check_async_error();  // nothing failed
}

TEST_CASE("GradientSync over nccl: one rank without reduce_single_rank leaves the gradients alone", "[gpu][nccl][sync]") {
    GpuParams ps({7, 1000003});
    SyncOptions o = device_options(64u << 20, true);
    o.reduce_single_rank = false;
    GradientSync gs(std::make_unique<NcclCommunicator>(), ps.ptrs, o);
    const int R = gs.communicator().size(), me = gs.communicator().rank();
    run_step(gs, ps, me, 0);
    if (R == 1) {
        REQUIRE(gs.stats().collectives == 0);
        check_average(ps, 1, 0, WireFormat::Float32);  // untouched: the input itself
    } else {
        REQUIRE(gs.on_device());
        check_average(ps, R, 0, WireFormat::Float32);
    }
}

TEST_CASE("GradientSync over nccl on GPU gradients: float32 average for any bucket layout, overlap on and off",
          "[gpu][nccl][sync]") {
    struct Case {
        size_t fusion;
        bool overlap;
        const char* what;
    };
    for (const Case& c : {Case{64u << 20, true, "one bucket"}, Case{16u << 10, true, "16 KiB buckets"},
                          Case{16u << 10, false, "16 KiB buckets, overlap off"}, Case{0, true, "a bucket per tensor"},
                          Case{0, false, "a bucket per tensor, overlap off"}}) {
        INFO(c.what);
        GpuParams ps;
        GradientSync gs(std::make_unique<NcclCommunicator>(), ps.ptrs, device_options(c.fusion, c.overlap));
        const int R = gs.communicator().size(), me = gs.communicator().rank();
        REQUIRE(gs.on_device());
        const size_t B = gs.bucket_count();
        if (c.fusion == (64u << 20)) REQUIRE(B == 1);
        if (c.fusion == 0) REQUIRE(B == ps.ptrs.size());
        if (c.fusion == (16u << 10)) REQUIRE(B > 2);
        REQUIRE(gs.overlapping() == (c.overlap && B > 1));
        const int steps = 4;
        for (int step = 0; step < steps; ++step) {
            // Step 1 leaves gradients for synchronize() to pack; step 2 fills the buckets in the wrong order.
            run_step(gs, ps, me, step, step == 1 ? std::set<size_t>{0, 3, 5} : std::set<size_t>{}, step == 2);
            check_average(ps, R, step, WireFormat::Float32);
        }
        const sync::SyncStats st = gs.stats();
        REQUIRE(st.steps == static_cast<uint64_t>(steps));
        REQUIRE(st.collectives == B * steps);
        REQUIRE(st.blocked_s >= 0.0);
        uint64_t bytes = 0;
        for (const sync::BucketStat& b : st.buckets) {
            REQUIRE(b.calls == static_cast<uint64_t>(steps - 1));  // the first step is left out of the buckets' times
            REQUIRE(b.total_s >= 0.0);  // GPU time of the steps polled so far (all but the last)
            REQUIRE(std::isfinite(b.total_s));
            bytes += b.bytes;
        }
        REQUIRE(bytes == 4u * (1 + 300 + 7 + 1000003 + 64 + 4096 + 1));
        const comm::ByteCount expect = expected_bytes(gs, WireFormat::Float32, steps, me, R);
        REQUIRE(gs.communicator().bytes_sent() == expect.sent);
        REQUIRE(gs.communicator().bytes_received() == expect.received);
    }
}

TEST_CASE("GradientSync over nccl: fp16 and bf16 give the 16-bit rounding of the average, half the bytes",
          "[gpu][nccl][sync][compression]") {
    uint64_t sent32 = 0, received32 = 0;
    for (WireFormat w : {WireFormat::Float32, WireFormat::Float16, WireFormat::BFloat16}) {
        for (bool overlap : {true, false}) {
            INFO("wire " << comm::wire_format_name(w) << ", overlap " << overlap);
            GpuParams ps;
            GradientSync gs(std::make_unique<NcclCommunicator>(), ps.ptrs, device_options(64u << 10, overlap, w));
            const int R = gs.communicator().size(), me = gs.communicator().rank();
            REQUIRE(gs.on_device());
            const int steps = 3;
            for (int step = 0; step < steps; ++step) {
                run_step(gs, ps, me, step, step == 1 ? std::set<size_t>{2} : std::set<size_t>{});
                check_average(ps, R, step, w);
            }
            const comm::ByteCount expect = expected_bytes(gs, w, steps, me, R);
            REQUIRE(gs.communicator().bytes_sent() == expect.sent);
            REQUIRE(gs.communicator().bytes_received() == expect.received);
            if (w == WireFormat::Float32) {
                sent32 = gs.communicator().bytes_sent();
                received32 = gs.communicator().bytes_received();
            } else {
                // Same layout, same steps: exactly half of float32's traffic (0 = 0 at one rank).
                REQUIRE(2 * gs.communicator().bytes_sent() == sent32);
                REQUIRE(2 * gs.communicator().bytes_received() == received32);
            }
        }
    }
}

TEST_CASE("GradientSync over nccl: many consecutive steps reuse the events; every step is that step's average",
          "[gpu][nccl][sync]") {
    GpuParams ps({1, 7, 1000003, 33, 1});
    for (WireFormat w : {WireFormat::Float32, WireFormat::BFloat16}) {
        INFO("wire " << comm::wire_format_name(w));
        GradientSync gs(std::make_unique<NcclCommunicator>(), ps.ptrs, device_options(0, true, w));
        const int R = gs.communicator().size(), me = gs.communicator().rank();
        const int steps = 12;
        for (int step = 0; step < steps; ++step) {
            run_step(gs, ps, me, step);
            // Read back only every third step, so the host also runs ahead of the GPU in between.
            if (step % 3 == 2 || step == steps - 1) check_average(ps, R, step, w);
        }
        const sync::SyncStats st = gs.stats();
        REQUIRE(st.steps == static_cast<uint64_t>(steps));
        REQUIRE(st.collectives == gs.bucket_count() * steps);
        double gpu_s = 0;
        for (const sync::BucketStat& b : st.buckets) gpu_s += b.total_s;
        REQUIRE(gpu_s >= 0.0);
        REQUIRE(gpu_s < 60.0);
    }
}

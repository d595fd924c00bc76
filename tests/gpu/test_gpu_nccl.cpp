// NCCL collectives on device buffers (N = 1 on one GPU; N > 1 only when every rank has its own GPU), and the
// Communicator interface on host spans (staged through pinned memory).
#include <catch2/catch.hpp>

#include <vector>

#include "ringtrain/comm/nccl_communicator.hpp"
#include "ringtrain/core/tensor.hpp"

using namespace ringtrain;
using comm::NcclCommunicator;
using comm::ReduceOp;

namespace {
float value(int rank, size_t i) { return static_cast<float>((rank + 1) * 0.5 + static_cast<double>(i % 97)); }
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

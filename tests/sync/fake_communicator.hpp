// A communicator that talks to no one, for the sync tests: rank 0 of 2, records each float allreduce's size, fails
// on the fail_at-th one, and throws instead of aborting the job.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

namespace sync_test {

class FakeComm final : public ringtrain::comm::Communicator {
public:
    int rank() const override { return 0; }
    int size() const override { return 2; }
    int local_rank() const override { return 0; }
    int local_size() const override { return 2; }
    std::string backend() const override { return "fake"; }
    void allreduce(std::span<float> data, ringtrain::comm::ReduceOp) override {
        sizes.push_back(data.size());
        if (sizes.size() == fail_at) throw ringtrain::Error("injected allreduce failure");
    }
    void allreduce(std::span<double>, ringtrain::comm::ReduceOp) override {}
    void broadcast(std::span<float>, int) override {}
    void broadcast_bytes(std::span<std::byte>, int) override {}
    std::vector<float> allgather(std::span<const float> mine) override { return {mine.begin(), mine.end()}; }
    std::vector<uint64_t> allgather(uint64_t mine) override { return {mine}; }
    std::vector<std::byte> allgather_bytes(std::span<const std::byte> mine) override { return {mine.begin(), mine.end()}; }
    void barrier() override {}
    uint64_t bytes_sent() const override { return 0; }
    uint64_t bytes_received() const override { return 0; }
    [[noreturn]] void abort(const std::string& message, int) override { throw ringtrain::Error("abort: " + message); }
    std::string waiting_for() const override { return waiting; }

    std::vector<size_t> sizes;
    size_t fail_at = 1000;
    std::string waiting;  // what waiting_for() says
};

}  // namespace sync_test

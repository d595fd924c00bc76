// The part of a stand-in communicator the predictor's measurement tests share: rank 0 of two on one process, with
// barrier and the double allreduce (the slowest rank's time: rank 0's own) doing nothing, and every collective the
// measurements do not use throwing. A test derives its float allreduce (how its link behaves) and backend name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringtrain/comm/communicator.hpp"

namespace rt_predict_test {

class Rank0OfTwo : public ringtrain::comm::Communicator {
public:
    int rank() const override { return 0; }
    int size() const override { return 2; }
    int local_rank() const override { return 0; }
    int local_size() const override { return 1; }

    void allreduce(std::span<double>, ringtrain::comm::ReduceOp) override {}
    void barrier() override {}
    void broadcast(std::span<float>, int) override { unused(); }
    void broadcast_bytes(std::span<std::byte>, int) override { unused(); }
    std::vector<float> allgather(std::span<const float>) override { unused(); }
    std::vector<uint64_t> allgather(uint64_t) override { unused(); }
    std::vector<std::byte> allgather_bytes(std::span<const std::byte>) override { unused(); }
    uint64_t bytes_sent() const override { return 0; }
    uint64_t bytes_received() const override { return 0; }
    [[noreturn]] void abort(const std::string& message, int) override { throw std::runtime_error(message); }

private:
    [[noreturn]] void unused() const { throw std::logic_error(backend() + ": not a collective the measurement uses"); }
};

}  // namespace rt_predict_test

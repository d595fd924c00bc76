// The start-up agreement: facts from JSON and parameter lists, the first differing key and its message, the
// exchange over real ranks, the backend check at communicator creation, and the shared-memory path's late ranks.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "ringtrain/comm/ring_communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/sync/consistency.hpp"
#include "ringtrain/sync/setup_deadline.hpp"
#include "ringtrain/sync/stall_inspector.hpp"
#include "comm/serial_reference.hpp"
#include "fake_communicator.hpp"

using namespace ringtrain;
using rt_test::world_rank;
using rt_test::world_size;
using sync::Fact;
using sync::Facts;

namespace {

Facts facts(std::initializer_list<Fact> f) { return Facts(f); }

}  // namespace

TEST_CASE("append_json_facts: dotted keys, indexed arrays of objects, scalar arrays as values", "[agree]") {
    const auto doc = nlohmann::json::parse(R"({"train": {"batch_size": 64, "name": "x"}, "shape": [1, 8, 8],
        "layers": [{"type": "linear", "out_features": 16}, {"type": "relu"}], "empty": {}})");
    Facts f;
    sync::append_json_facts(doc, "", f);
    CHECK(f == facts({{"empty", "{}"},
                      {"layers[0].out_features", "16"},
                      {"layers[0].type", "linear"},
                      {"layers[1].type", "relu"},
                      {"layers (elements)", "2"},
                      {"shape", "[1,8,8]"},
                      {"train.batch_size", "64"},
                      {"train.name", "x"}}));
    Facts m;
    sync::append_json_facts(nlohmann::json::parse(R"({"a": 0.5})"), "model", m);
    CHECK(m == facts({{"model.a", "0.5"}}));
}

TEST_CASE("first_disagreement names the first differing key and every rank's value", "[agree]") {
    const Facts a = facts({{"optimizer.name", "sgd"}, {"train.batch_size", "64"}, {"train.epochs", "2"}});
    Facts b = a;
    CHECK_FALSE(sync::first_disagreement({a, b, a}).has_value());
    b[1].value = "32";
    b[2].value = "3";
    CHECK(sync::first_disagreement({a, b}) == "ranks disagree on train.batch_size: rank 0 has 64, rank 1 has 32");
    // Ranks holding one value are grouped, as ranges.
    CHECK(sync::first_disagreement({a, a, a, b, a, b}) ==
          "ranks disagree on train.batch_size: ranks 0-2, 4 have 64, ranks 3, 5 have 32");
    // A key one rank lacks, and an empty value, are shown as such.
    Facts c = a;
    c.pop_back();
    c[0].value = "";
    CHECK(sync::first_disagreement({a, c}) == "ranks disagree on optimizer.name: rank 0 has sgd, rank 1 has \"\"");
    c[0].value = "sgd";
    CHECK(sync::first_disagreement({a, c}) == "ranks disagree on train.epochs: rank 0 has 2, rank 1 has (none)");
    CHECK(sync::first_disagreement({c, a}) == "ranks disagree on train.epochs: rank 0 has (none), rank 1 has 2");
}

TEST_CASE("append_parameter_facts: the count, then each parameter's name and shape", "[agree]") {
    nn::Parameter w{"fc.weight", Tensor::zeros({4, 3}), Tensor()};
    nn::Parameter b{"fc.bias", Tensor::zeros({4}), Tensor()};
    Facts f;
    sync::append_parameter_facts({&w, &b}, f);
    REQUIRE(f.size() == 3);
    CHECK(f[0] == Fact{"model parameters", "2"});
    CHECK(f[1].key == "model parameter #0");
    CHECK(f[1].value == "'fc.weight' " + shape_string({4, 3}));
    CHECK(f[2] == Fact{"model parameter #1", "'fc.bias' " + shape_string({4})});
}

TEST_CASE("require_same_facts: silent when the ranks agree, the same error on every rank when not", "[agree][mpi]") {
    auto comm = comm::make_communicator("mpi");
    const int me = comm->rank(), n = comm->size();
    const Facts same = facts({{"train.batch_size", "64"}, {"model", "m.json"}});
    CHECK_NOTHROW(sync::require_same_facts(*comm, same));
    // Rank-dependent lengths too: the exchange must carry documents of different sizes.
    Facts mine = same;
    mine.push_back({"sync.compression", me == 0 ? "none" : std::string(static_cast<size_t>(me), 'f')});
    if (n == 1) {
        CHECK_NOTHROW(sync::require_same_facts(*comm, mine));
        return;
    }
    std::string expected = "ranks disagree on sync.compression: rank 0 has none";
    for (int r = 1; r < n; ++r) expected += ", rank " + std::to_string(r) + " has " + std::string(static_cast<size_t>(r), 'f');
    CHECK_THROWS_AS(sync::require_same_facts(*comm, mine), CollectiveInputError);
    CHECK_THROWS_WITH(sync::require_same_facts(*comm, mine), expected + "; every rank must run the same config");
    // The communicator is still usable afterwards: every rank left the check at the same point.
    CHECK_NOTHROW(sync::require_same_facts(*comm, same));
}

TEST_CASE("gather_to_root and scatter_from_root: every rank's tensors to rank 0 and each rank's own back",
          "[agree][mpi][local_sgd]") {
    const int me = world_rank(), n = world_size();
    auto comm = comm::make_communicator("ring");
    // Rank r's tensor i holds 100 r + 10 i + j.
    std::vector<Tensor> mine = {Tensor({2, 3}), Tensor({1}), Tensor({0})};
    auto fill = [&](int rank) {
        for (size_t i = 0; i < mine.size(); ++i)
            for (int64_t j = 0; j < mine[i].numel(); ++j)
                mine[i].data()[j] = static_cast<float>(100 * rank + 10 * i + j);
    };
    fill(me);
    std::vector<Tensor*> tensors;
    for (Tensor& t : mine) tensors.push_back(&t);
    std::vector<std::vector<float>> all = sync::gather_to_root(*comm, tensors);
    REQUIRE(all.size() == mine.size());
    for (size_t i = 0; i < mine.size(); ++i) {
        const auto numel = static_cast<size_t>(mine[i].numel());
        if (me != 0) {
            CHECK(all[i].empty());
            continue;
        }
        REQUIRE(all[i].size() == numel * static_cast<size_t>(n));
        for (int r = 0; r < n; ++r)
            for (size_t j = 0; j < numel; ++j)
                CHECK(all[i][static_cast<size_t>(r) * numel + j] ==
                      static_cast<float>(100 * r + 10 * static_cast<int>(i) + static_cast<int>(j)));
    }
    // Back, after the ranks' own values were overwritten (as a resumed run's are by rank 0's broadcast).
    for (Tensor& t : mine) std::fill(t.data(), t.data() + t.numel(), -1.0f);
    sync::scatter_from_root(*comm, all, tensors);
    std::vector<float> got;
    for (const Tensor& t : mine) got.insert(got.end(), t.data(), t.data() + t.numel());
    fill(me);
    std::vector<float> want;
    for (const Tensor& t : mine) want.insert(want.end(), t.data(), t.data() + t.numel());
    CHECK(got == want);
}

TEST_CASE("ranks that pick different backends are told so when the communicator is made", "[agree][mpi]") {
    const int me = world_rank(), n = world_size();
    const std::string backend = me == 0 ? "ring" : "mpi";
    if (n == 1) {
        CHECK_NOTHROW(comm::make_communicator(backend));
        return;
    }
    CHECK_THROWS_WITH(comm::make_communicator(backend),
                      "ranks disagree on sync.backend: rank 0 has ring, rank 1 has mpi; every rank must run the same config");
    CHECK_NOTHROW(comm::make_communicator("ring"));  // and everyone can go on
}

TEST_CASE("the shared-memory allreduce names the ranks that have not arrived", "[agree][mpi]") {
    const int me = world_rank(), n = world_size();
    comm::RingOptions o;
    o.shared_memory_max_bytes = comm::kSharedMemoryMaxBytes;
    comm::RingCommunicator ring(o);
    if (n == 1 || !ring.uses_shared_memory()) return;
    CHECK(ring.waiting_for().empty());  // in no collective
    std::vector<float> v(1024, 1.0f);
    if (me != 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        ring.allreduce(v);
        return;
    }
    std::atomic<bool> done{false};
    std::string seen;
    std::thread poll([&] {
        while (!done.load() && seen.empty()) {
            seen = ring.waiting_for();
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    });
    ring.allreduce(v);
    done = true;
    poll.join();
    std::string expected;
    for (int r = 1; r < n; ++r) expected += (r > 1 ? ", " : "") + std::to_string(r);
    CHECK(seen == expected);
    CHECK(v[0] == static_cast<float>(n));
}

TEST_CASE("StallInspector: the stall texts name the late ranks where the communicator knows them", "[agree][stall]") {
    sync_test::FakeComm comm;
    comm.waiting = "1";
    const sync::CollectiveTag tag{0, 1u << 18, 4};
    sync::StallInspector inspector(comm, 1.0, 2.0);
    bool warned = false;
    CHECK_THROWS_WITH(inspector.inspect(tag, 2.5, warned),
                      "abort: allreduce of bucket 0 (1.00 MiB, step 4) has not completed after 2.5 s; waiting for rank 1; "
                      "aborting the job (sync.stall_abort_s = 2)");
    comm.waiting = "1, 3";
    CHECK_THROWS_WITH(inspector.inspect(tag, 2.5, warned),
                      Catch::Contains("; waiting for ranks 1, 3; aborting the job"));
}

TEST_CASE("SetupDeadline: disarmed in time it never aborts; its message names the key and the phase", "[agree]") {
    sync_test::FakeComm comm;  // its abort throws: on the deadline's thread that would end the test program
    {
        sync::SetupDeadline deadline(comm, 0.3);
        deadline.enter("reading its data");
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        deadline.disarm();
        std::this_thread::sleep_for(std::chrono::milliseconds(400));  // past the limit: nothing happens
    }
    { sync::SetupDeadline off(comm, 0); }  // 0 = no limit: no thread at all
    CHECK(sync::SetupDeadline::message(3, "reading its data").rfind(
              "set-up has not finished after 3 s (sync.setup_timeout_s = 3): this rank is still reading its data; ", 0) == 0);
    CHECK(sync::SetupDeadline::kExitCode == 1);
}

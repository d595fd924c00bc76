// Timeline: Chrome trace JSON per rank, the spans GradientSync records, and the disabled path.
#include <catch2/catch.hpp>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/sync/gradient_sync.hpp"
#include "ringtrain/telemetry/timeline.hpp"
#include "sync_test_util.hpp"

using namespace ringtrain;
using namespace sync_test;
using nlohmann::json;

namespace {

// The same path on every rank (rank 0's choice).
std::string shared_temp_path(const std::string& stem) {
    long long id = static_cast<long long>(getpid());
    MPI_Bcast(&id, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    return "/tmp/ringtrain_test_" + stem + "_" + std::to_string(id) + ".json";
}

json read_json(const std::string& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    return json::parse(in);  // throws (fails the test) on invalid JSON
}

// Checks the Chrome trace shape of every event and returns the names of the complete ("X") events.
std::multiset<std::string> check_trace(const json& doc, int rank) {
    REQUIRE(doc.is_object());
    CHECK(doc.at("displayTimeUnit") == "ms");
    const json& ev = doc.at("traceEvents");
    REQUIRE(ev.is_array());
    std::multiset<std::string> names;
    for (const json& e : ev) {
        CHECK(e.at("pid") == rank);
        CHECK(e.at("tid").is_number_integer());
        const std::string ph = e.at("ph");
        if (ph == "M") continue;
        CHECK(ph == "X");
        CHECK(e.at("name").is_string());
        CHECK(e.at("cat").is_string());
        CHECK(e.at("ts").is_number_integer());
        CHECK(e.at("dur").is_number_integer());
        CHECK(e.at("dur").get<int64_t>() >= 0);
        names.insert(e.at("name").get<std::string>());
    }
    return names;
}

}  // namespace

TEST_CASE("timeline: spans from several threads, one file per rank, valid Chrome trace JSON", "[timeline]") {
    const int me = world_rank();
    const std::string path = shared_temp_path("timeline_basic");
    telemetry::Timeline tl(path, me, true);
    CHECK(tl.file_path() == (me == 0 ? path : path + ".rank" + std::to_string(me)));
    tl.name_thread("main");
    {
        telemetry::Span s(&tl, "forward", "train");
        s.set_args({{"layer", "conv1 \"quoted\""}});
    }
    std::thread t([&] {
        tl.name_thread("worker");
        for (int i = 0; i < 100; ++i) telemetry::Span s(&tl, "worker span", "test");
    });
    t.join();
    tl.add("manual", "test", tl.now_us(), 5);  // no args: the event has none
    CHECK(tl.event_count() == 102);
    std::string err;
    REQUIRE(tl.write(&err));
    const json doc = read_json(tl.file_path());
    const auto names = check_trace(doc, me);
    CHECK(names.count("forward") == 1);
    CHECK(names.count("worker span") == 100);
    CHECK(names.count("manual") == 1);
    for (const json& e : doc["traceEvents"])
        if (e["name"] == "manual") CHECK_FALSE(e.contains("args"));
    std::set<int64_t> tids;
    bool has_thread_names = false;
    for (const json& e : doc["traceEvents"]) {
        if (e["ph"] == "X") tids.insert(e["tid"].get<int64_t>());
        if (e["name"] == "thread_name" && e["args"]["name"] == "worker") has_thread_names = true;
        if (e["name"] == "forward") CHECK(e["args"]["layer"] == "conv1 \"quoted\"");
    }
    CHECK(tids.size() == 2);
    CHECK(has_thread_names);
    std::remove(tl.file_path().c_str());

    // Disabled: nothing recorded, nothing written.
    telemetry::Timeline off(path + ".off", me, false);
    { telemetry::Span s(&off, "x"); }
    off.add("y", "z", 0, 1);
    CHECK(off.event_count() == 0);
    CHECK(off.write());
    CHECK_FALSE(std::ifstream(off.file_path()).good());
    // Bounded.
    telemetry::Timeline small(path + ".small", me, true, 3);
    for (int i = 0; i < 5; ++i) small.add("e", "c", i, 1);
    CHECK(small.event_count() == 3);
    CHECK(small.dropped_count() == 2);
    REQUIRE(small.write());
    CHECK(read_json(small.file_path())["otherData"]["droppedEvents"] == 2);
    std::remove(small.file_path().c_str());
}

TEST_CASE("timeline: names and args with quotes, backslashes and control characters stay valid JSON", "[timeline]") {
    const int me = world_rank();
    const std::string path = shared_temp_path("timeline_escape");
    telemetry::Timeline tl(path, me, true);
    const std::string nasty = std::string("a \"quoted\" \\path\\ with\ttab,\nnewline,\x01 and \x1f; {\"x\":1}") + '\0' + "end";
    tl.name_thread(nasty);
    {
        telemetry::Span s(&tl, nasty, "test");
        REQUIRE(s.active());
        s.set_args({{nasty, nasty}, {"n", 3}});
    }
    tl.add("added " + nasty, "test", tl.now_us(), 1, {{"layer", nasty}});
    tl.add("invalid UTF-8 \xff", "test", tl.now_us(), 1);  // written as U+FFFD, not an exception
    REQUIRE(tl.write());
    const json doc = read_json(tl.file_path());  // fails the test when the file is not valid JSON
    const auto names = check_trace(doc, me);
    CHECK(names.count(nasty) == 1);
    CHECK(names.count("added " + nasty) == 1);
    CHECK(names.count("invalid UTF-8 \xef\xbf\xbd") == 1);
    bool thread_named = false, span_args = false, added_args = false;
    for (const json& e : doc["traceEvents"]) {
        if (e["name"] == "thread_name" && e["args"]["name"] == nasty) thread_named = true;
        if (e["name"] == nasty) span_args = e["args"][nasty] == nasty && e["args"]["n"] == 3;
        if (e["name"] == "added " + nasty) added_args = e["args"]["layer"] == nasty;
    }
    CHECK(thread_named);
    CHECK(span_args);
    CHECK(added_args);
    std::remove(tl.file_path().c_str());
}

TEST_CASE("timeline: GradientSync records pack, allreduce bucket <b>, unpack and wait", "[timeline][sync]") {
    const int n = world_size(), me = world_rank();
    const std::string path = shared_temp_path("timeline_sync");
    telemetry::Timeline tl(path, me, true);
    {
        ParamSet ps;
        sync::GradientSync gs(comm::make_communicator("ring"), ps.ptrs, sync::SyncOptions{4096, true}, &tl);
        for (int64_t step = 0; step < 2; ++step) {
            gs.begin_step(step);
            fill_grads(ps, me, step, 3);
            // Rank 1 is late, so the others certainly wait in synchronize().
            if (me == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
            for (size_t k = ps.ptrs.size(); k-- > 0;) gs.on_gradient_ready(*ps.ptrs[k]);
            telemetry::Span sw(&tl, "sync_wait", "train");
            gs.synchronize();
        }
    }
    REQUIRE(tl.write());
    const json doc = read_json(tl.file_path());
    const auto names = check_trace(doc, me);
    CHECK(names.count("sync_wait") == 2);
    if (n > 1) {
        CHECK(names.count("pack") == 2 * ParamSet().ptrs.size());
        CHECK(names.count("allreduce bucket 0") == 2);
        CHECK(names.count("allreduce bucket 5") == 2);
        CHECK(names.count("unpack") == 2 * 6);
        if (me != 1) CHECK(names.count("wait") >= 2);
        bool args_ok = false;
        for (const json& e : doc["traceEvents"])
            if (e["name"] == "allreduce bucket 0" && e["args"]["bytes"] == 70001 * 4 && e["args"]["wire"] == "fp32")
                args_ok = true;
        CHECK(args_ok);
    } else {
        CHECK(names.count("pack") == 0);  // one rank: no communication, nothing to record
    }
    std::remove(tl.file_path().c_str());
}

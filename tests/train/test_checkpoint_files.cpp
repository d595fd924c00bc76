// The checkpoint folder in-process: `keep` by global step, the checked `latest` write, no temporary left by a
// failed write, and which files resume=auto may try.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <functional>

#include "checkpoint_surgery.hpp"
#include "fixtures.hpp"
#include "ringtrain/train/checkpoint.hpp"

using namespace rt_test;
using namespace ringtrain;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> files_in(const std::string& dir) {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
}

// A one-tensor "model" with `n` floats.
struct OneTensor {
    explicit OneTensor(int64_t n) : p{"w", Tensor({n}), Tensor({n})} {
        for (int64_t i = 0; i < n; ++i) p.value.data()[i] = static_cast<float>(i);
    }
    std::vector<nn::Parameter*> params() { return {&p}; }
    nn::Parameter p;
};

train::LoopState position(int64_t global_step) {
    train::LoopState s;
    s.epoch = global_step / 10;
    s.step_in_epoch = global_step % 10;
    s.global_step = global_step;
    s.steps_per_epoch = 10;
    s.world_size = 1;
    s.rng_states = {Rng(1).state()};
    return s;
}

}  // namespace

TEST_CASE("checkpoint names carry their global step", "[train][checkpoint]") {
    CHECK(train::checkpoint_step(train::checkpoint_file_name(120)) == 120);
    CHECK(train::checkpoint_step("ckpt-1000000000.bin") == 1000000000);
    for (const char* bad : {"ckpt-.bin", "ckpt-12.bin.tmp", "ckpt-1a.bin", "../ckpt-1.bin", "ckpt-1/.bin", "latest"})
        CHECK(train::checkpoint_step(bad) == -1);
}

TEST_CASE("keep removes the checkpoints of the lowest global steps, not the first names", "[train][checkpoint]") {
    const std::string dir = temp_dir("keep-by-step");
    // 999999999 sorts after 1000000000 by name; by step it is the older one.
    for (const char* n : {"ckpt-999999999.bin", "ckpt-1000000000.bin", "ckpt-000000005.bin"}) write_file(dir + "/" + n, "x");
    train::publish_checkpoint(dir, "ckpt-1000000000.bin", 2);
    CHECK(files_in(dir) == std::vector<std::string>{"ckpt-1000000000.bin", "ckpt-999999999.bin", "latest"});
    train::publish_checkpoint(dir, "ckpt-1000000000.bin", 1);
    CHECK(files_in(dir) == std::vector<std::string>{"ckpt-1000000000.bin", "latest"});
}

TEST_CASE("a failed write of latest is an error, not a silent stale pointer", "[train][checkpoint]") {
    const std::string dir = temp_dir("latest-fails");
    write_file(dir + "/ckpt-000000010.bin", "x");
    fs::create_directory(dir + "/latest.tmp");  // cannot be opened as a file, even by root
    CHECK_THROWS_WITH(train::publish_checkpoint(dir, "ckpt-000000010.bin", 1), Catch::Contains("latest.tmp"));
    CHECK(!fs::exists(dir + "/latest"));
}

TEST_CASE("a checkpoint write that fails (file size limit, as on a full disk) leaves no temporary", "[train][checkpoint]") {
    const std::string dir = temp_dir("disk-full");
    OneTensor m(1 << 16);  // 256 KiB of data
    rlimit old{};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // writes past the limit then fail with EFBIG
    rlimit small = old;
    small.rlim_cur = 64 * 1024;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    bool threw = false;
    try {
        train::save_checkpoint(dir + "/ckpt-000000010.bin", m.params(), nullptr, position(10));
    } catch (const Error& e) {
        threw = true;
        CHECK_THAT(e.what(), Catch::Contains("ckpt-000000010.bin.tmp"));
    }
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    CHECK(threw);
    CHECK(files_in(dir).empty());
    // Within the limit the same write succeeds and reads back.
    train::save_checkpoint(dir + "/ckpt-000000010.bin", m.params(), nullptr, position(10));
    OneTensor back(1 << 16);
    back.p.value.data()[5] = -1.0f;
    const train::LoopState s = train::load_checkpoint(dir + "/ckpt-000000010.bin", back.params(), nullptr);
    CHECK(s.global_step == 10);
    CHECK(back.p.value.data()[5] == 5.0f);
}

TEST_CASE("a damaged checkpoint changes nothing in the model it is loaded into", "[train][checkpoint]") {
    const std::string dir = temp_dir("no-partial-load");
    OneTensor m(100);
    nn::Parameter second{"v", Tensor({3}), Tensor({3})};
    std::vector<nn::Parameter*> two = {&m.p, &second};
    train::save_checkpoint(dir + "/c.bin", two, nullptr, position(3));
    {  // flip a bit of the second tensor: found only after the first was read and verified
        std::fstream f(dir + "/c.bin", std::ios::binary | std::ios::in | std::ios::out);
        f.seekg(-8, std::ios::end);  // the second tensor's last float, before the 4-byte footer
        char b = 0;
        f.get(b);
        f.seekp(-8, std::ios::end);
        f.put(static_cast<char>(b ^ 0x10));
    }
    OneTensor fresh(100);
    fresh.p.value.data()[7] = 42.0f;
    std::vector<nn::Parameter*> target = {&fresh.p, &second};
    CHECK_THROWS_AS(train::load_checkpoint(dir + "/c.bin", target, nullptr), train::CheckpointUnreadable);
    CHECK(fresh.p.value.data()[7] == 42.0f);
}

TEST_CASE("resume candidates: latest first, then by descending step, never a path outside", "[train][checkpoint]") {
    const std::string dir = temp_dir("candidates");
    CHECK(train::resume_candidates(dir).paths.empty());
    CHECK(train::resume_candidates(dir).latest_problem.empty());
    CHECK(!train::holds_checkpoints(dir));
    for (const char* n : {"ckpt-000000010.bin", "ckpt-000000030.bin", "ckpt-000000020.bin", "ckpt-000000040.bin.tmp"})
        write_file(dir + "/" + n, "x");
    CHECK(train::holds_checkpoints(dir));
    write_file(dir + "/latest", "ckpt-000000020.bin\n");
    auto c = train::resume_candidates(dir);
    CHECK(c.latest_problem.empty());
    CHECK(c.paths == std::vector<std::string>{dir + "/ckpt-000000020.bin", dir + "/ckpt-000000030.bin",
                                               dir + "/ckpt-000000010.bin"});
    write_file(dir + "/latest", "../../etc/passwd\n");
    c = train::resume_candidates(dir);
    CHECK_THAT(c.latest_problem, Catch::Contains("not a checkpoint file of this folder"));
    CHECK(c.paths.front() == dir + "/ckpt-000000030.bin");
    fs::remove(dir + "/latest");
    CHECK_THAT(train::resume_candidates(dir).latest_problem, Catch::Contains("latest is missing"));
    train::remove_stale_temporaries(dir);
    CHECK(!fs::exists(dir + "/ckpt-000000040.bin.tmp"));
    CHECK(fs::exists(dir + "/ckpt-000000010.bin"));
}

TEST_CASE("per-rank copies: stored after the run's own tensors, read back, checked like them",
          "[train][checkpoint][local_sgd]") {
    const std::string dir = temp_dir("rank-copies");
    OneTensor m(4);
    nn::Parameter v{"v", Tensor({2}), Tensor({2})};
    std::vector<nn::Parameter*> model = {&m.p, &v};
    train::LoopState at = position(3);
    at.world_size = 2;
    at.rng_states = {Rng(1).state(), Rng(2).state()};
    train::record_last_average_step(at, 0);
    // Rank 0's w and v, then rank 1's.
    const train::RankCopies copies{2, {{0, 1, 2, 3, 10, 11, 12, 13}, {5, 6, 15, 16}}};
    const std::string path = dir + "/ckpt.bin";
    train::save_checkpoint(path, model, nullptr, at, copies);
    const CheckpointBytes c = read_checkpoint_bytes(path);
    CHECK(c.header["rank_copies"] == 2);
    std::vector<std::string> names;
    for (const auto& t : c.header["tensors"]) names.push_back(t["name"]);
    CHECK(names == std::vector<std::string>{"w", "v", "rank0/w", "rank0/v", "rank1/w", "rank1/v"});

    OneTensor fresh(4);
    nn::Parameter v2{"v", Tensor({2}), Tensor({2})};
    std::vector<nn::Parameter*> target = {&fresh.p, &v2};
    train::RankCopies got;
    const train::LoopState s = train::load_checkpoint(path, target, nullptr, &got);
    CHECK(got.ranks == 2);
    CHECK(got.values == copies.values);
    CHECK(train::recorded_last_average_step(path, s) == 0);
    CHECK(got.cover(0, 2));
    CHECK_NOTHROW(train::load_checkpoint(path, target, nullptr));  // eval: the model alone

    // Copies of a run of the tensors (a synchronous run's BatchNorm buffers): v alone, named and read back as such.
    const train::RankCopies of_v{2, {{5, 6, 15, 16}}, 1};
    train::save_checkpoint(dir + "/v.bin", model, nullptr, at, of_v);
    const CheckpointBytes cv = read_checkpoint_bytes(dir + "/v.bin");
    names.clear();
    for (const auto& t : cv.header["tensors"]) names.push_back(t["name"]);
    CHECK(names == std::vector<std::string>{"w", "v", "rank0/v", "rank1/v"});
    train::load_checkpoint(dir + "/v.bin", target, nullptr, &got);
    CHECK(got.first == 1);
    CHECK(got.values == of_v.values);
    CHECK(got.cover(1, 1));
    CHECK_FALSE(got.cover(0, 2));  // not what a local SGD run resumes from

    // A checkpoint without copies (as every checkpoint before them) reads as none, and records no average step.
    train::save_checkpoint(dir + "/plain.bin", model, nullptr, position(3));
    const train::LoopState plain = train::load_checkpoint(dir + "/plain.bin", target, nullptr, &got);
    CHECK(got.empty());
    CHECK_THROWS_AS(train::recorded_last_average_step(dir + "/plain.bin", plain), train::CheckpointUnreadable);

    // Copies that do not fit the tensors are the caller's bug, never a file.
    CHECK_THROWS_AS(train::save_checkpoint(dir + "/bad.bin", model, nullptr, at, train::RankCopies{2, {{0, 1, 2, 3}}}),
                    Error);
    CHECK_FALSE(fs::exists(dir + "/bad.bin"));

    // A damaged copy fails its checksum before anything is restored.
    const std::string damaged = dir + "/damaged.bin";
    fs::copy_file(path, damaged);
    flip_bit(damaged, c.bytes.size() - 8, 3);  // rank 1's v, before the 4-byte footer
    fresh.p.value.data()[1] = 42.0f;
    CHECK_THROWS_AS(train::load_checkpoint(damaged, target, nullptr, &got), train::CheckpointUnreadable);
    CHECK(fresh.p.value.data()[1] == 42.0f);

    // Crafted headers (checksums recomputed): a copy under another name, more copies than ranks.
    for (const auto& [what, edit] : std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>>{
             {"is not rank 1's copy of 'v'", [](nlohmann::json& h) { h["tensors"][5]["name"] = "rank1/x"; }},
             {"key 'rank_copies' is 3, not 0 or world_size 2", [](nlohmann::json& h) { h["rank_copies"] = 3; }},
             {"lists 5 tensors, too few for 2 per-rank copies of tensors 0 to 1",
              [](nlohmann::json& h) { h["tensors"].erase(5); }},
             {"lists 5 tensors, not the run's own and 2 per-rank copies",  // as written before the subset keys
              [](nlohmann::json& h) {
                  h["tensors"].erase(5);
                  h.erase("rank_copies_first");
                  h.erase("rank_copies_tensors");
              }},
             {"tensor entry 4 ('rank1/w') is not rank 0's copy of 'v'",
              [](nlohmann::json& h) {
                  h["rank_copies_first"] = 1;
                  h["rank_copies_tensors"] = 1;
              }},
             {"too few for 2 per-rank copies of tensors 1 to 2", [](nlohmann::json& h) { h["rank_copies_first"] = 1; }}}) {
        INFO(what);
        const std::string crafted = dir + "/crafted.bin";
        fs::remove(crafted);
        fs::copy_file(path, crafted);
        nlohmann::json h = c.header;
        edit(h);
        replace_header(crafted, h.dump());
        try {
            train::load_checkpoint(crafted, target, nullptr, &got);
            FAIL("loaded");
        } catch (const train::CheckpointUnreadable& e) {
            CHECK_THAT(e.what(), Catch::Contains(what));
        }
    }
}

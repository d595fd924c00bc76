// The checkpoint folder in-process: `keep` by global step, the checked `latest` write, no temporary left by a
// failed write, and which files resume=auto may try.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <csignal>
#include <filesystem>

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

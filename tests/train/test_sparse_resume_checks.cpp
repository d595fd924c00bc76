// The sparse path's set-up and resume through the binary: resume=auto follows the dense path's rule (every
// checkpoint damaged: exit 2, nothing overwritten; a bad `latest`: a warning), a checkpoint refuses a run that would
// read other rows than the one that wrote it, set-up obeys sync.setup_timeout_s, and the feature count of
// data.num_features 0 is the whole file's when each rank scans only its share.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "sparse_files.hpp"
#include "support/run_command.hpp"

using namespace rt_test;
using nlohmann::json;

namespace {

std::string config(const std::string& train, const std::string& test, const std::string& out) {
    return R"({"model": ")" + source_dir() + R"(/models/sparse_logreg.json",
  "data": {"format": "libsvm", "train_file": ")" + train + R"(", "test_file": ")" + test + R"(", "num_features": 64},
  "train": {"seed": 5, "batch_size": 8, "log_every_steps": 1},
  "optimizer": {"name": "adagrad", "lr": 0.1},
  "checkpoint": {"every_steps": 2},
  "output": {"dir": ")" + out + R"(", "progress": "none"}})";
}

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// Flips one byte in the middle of `path` (the checksums then fail).
void damage(const std::string& path) {
    std::string bytes = slurp(path);
    REQUIRE(bytes.size() > 100);
    bytes[bytes.size() / 2] ^= 0x5a;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

struct Run {
    std::string dir, cfg, out;
};

// One rank, 4 steps of 8 rows: checkpoints at steps 2 and 4 (ckpt-4 named by `latest`), metrics.jsonl.
Run trained(const std::string& name) {
    Run r{temp_dir(name), "", ""};
    write_svm(r.dir + "/train.svm", svm_rows(64, 50, 3));
    write_svm(r.dir + "/test.svm", svm_rows(16, 50, 4));
    r.out = r.dir + "/out";
    r.cfg = r.dir + "/c.json";
    write_file(r.cfg, config(r.dir + "/train.svm", r.dir + "/test.svm", r.out));
    const auto first = run_command(binary() + " train --config " + r.cfg + " --set train.max_steps=4");
    INFO(first.output);
    REQUIRE(first.exit_code == 0);
    REQUIRE(std::filesystem::exists(r.out + "/checkpoints/ckpt-000000004.bin"));
    REQUIRE(std::filesystem::exists(r.out + "/checkpoints/ckpt-000000002.bin"));
    return r;
}

}  // namespace

TEST_CASE("sparse resume=auto with every checkpoint damaged exits 2 and leaves metrics.jsonl alone",
          "[train][sparse][checkpoint]") {
    const Run r = trained("sparse-resume-damaged");
    damage(r.out + "/checkpoints/ckpt-000000002.bin");
    damage(r.out + "/checkpoints/ckpt-000000004.bin");
    const std::string metrics = slurp(r.out + "/metrics.jsonl"), summary = slurp(r.out + "/summary.json");
    REQUIRE_FALSE(metrics.empty());
    const auto again = run_command(binary() + " train --config " + r.cfg + " --set checkpoint.resume=auto");
    INFO(again.output);
    CHECK(again.exit_code == 2);
    CHECK_THAT(again.output, Catch::Contains("checkpoint.resume=auto found checkpoints but can use none"));
    CHECK(slurp(r.out + "/metrics.jsonl") == metrics);
    CHECK(slurp(r.out + "/summary.json") == summary);
}

TEST_CASE("sparse resume=auto past a `latest` naming a missing file says so and resumes", "[train][sparse][checkpoint]") {
    const Run r = trained("sparse-resume-latest");
    write_file(r.out + "/checkpoints/latest", "ckpt-000000099.bin\n");
    const auto again = run_command(binary() + " train --config " + r.cfg +
                                   " --set checkpoint.resume=auto --set train.max_steps=6");
    INFO(again.output);
    REQUIRE(again.exit_code == 0);
    CHECK_THAT(again.output, Catch::Contains("warning: resuming from " + r.out + "/checkpoints/ckpt-000000004.bin"));
    CHECK_THAT(again.output, Catch::Contains("latest names ckpt-000000099.bin, which does not exist"));
    const json s = read_json(r.out + "/summary.json");
    CHECK(s["resumed"] == true);
    CHECK(s["resumed_from"] == r.out + "/checkpoints/ckpt-000000004.bin");
    CHECK(s["sync"]["second_collectives"] == 0);  // one rank: nothing gathered
    CHECK(s["steps"] == 6);
}

TEST_CASE("a sparse run resumed at its end keeps the finished run's summary; more steps still train",
          "[train][sparse][checkpoint]") {
    const Run r = trained("sparse-resume-finished");
    const std::string metrics = slurp(r.out + "/metrics.jsonl"), summary = slurp(r.out + "/summary.json");
    REQUIRE(read_json(r.out + "/summary.json")["samples_per_s"].get<double>() > 0);
    // A requeued job with the same command: nothing to train, and its results must survive.
    const auto again = run_command(binary() + " train --config " + r.cfg +
                                   " --set checkpoint.resume=auto --set train.max_steps=4");
    INFO(again.output);
    REQUIRE(again.exit_code == 0);
    CHECK_THAT(again.output, Catch::Contains("nothing left to train: the checkpoint is the end of the run (step 4 of "
                                             "train.max_steps 4)"));
    CHECK_THAT(again.output, Catch::Contains("done: 4 steps"));
    CHECK(slurp(r.out + "/summary.json") == summary);
    CHECK(slurp(r.out + "/metrics.jsonl") == metrics);
    const auto more = run_command(binary() + " train --config " + r.cfg +
                                  " --set checkpoint.resume=auto --set train.max_steps=6");
    INFO(more.output);
    REQUIRE(more.exit_code == 0);
    CHECK(read_json(r.out + "/summary.json")["steps"] == 6);
}

TEST_CASE("a sparse checkpoint refuses a run that would read other rows, naming the key and both values",
          "[train][sparse][checkpoint]") {
    const Run r = trained("sparse-resume-stream");
    const std::string resume = binary() + " train --config " + r.cfg + " --set checkpoint.resume=auto ";
    struct Case {
        std::string sets, says;
    };
    const Case cases[] = {
        {"--set train.batch_size=16", "written with train.batch_size 8, this run has 16"},
        {"--set data.shuffle_buffer=32", "written with data.shuffle_buffer 0, this run has 32"},
        {"--set train.seed=6", "written with train.seed 5, this run has 6"},
    };
    for (const Case& c : cases) {
        SECTION(c.sets) {
            const auto again = run_command(resume + c.sets);
            INFO(again.output);
            CHECK(again.exit_code == 2);
            CHECK_THAT(again.output, Catch::Contains("ckpt-000000004.bin: " + c.says));
        }
    }
    SECTION("another training file of the same size") {
        write_svm(r.dir + "/train.svm", svm_rows(64, 50, 9));  // fixed-width rows: same size, other rows
        const auto again = run_command(resume);
        INFO(again.output);
        CHECK(again.exit_code == 2);
        CHECK_THAT(again.output, Catch::Contains("ckpt-000000004.bin: written with data.train_file \"4672 bytes"));
    }
    SECTION("another world size") {
        const auto again = run_command(mpirun(2) + resume);
        INFO(again.output);
        CHECK(again.exit_code == 2);
        CHECK_THAT(again.output, Catch::Contains("written with world size 1 (mpirun -np), this run has 2"));
    }
    SECTION("the same settings resume") {
        const auto again = run_command(resume + "--set train.max_steps=6");
        INFO(again.output);
        CHECK(again.exit_code == 0);
    }
}

TEST_CASE("sparse set-up stuck on its training file ends after sync.setup_timeout_s", "[train][sparse]") {
    const std::string dir = temp_dir("sparse-setup-timeout");
    write_svm(dir + "/test.svm", svm_rows(16, 50, 4));
    REQUIRE(mkfifo((dir + "/train.svm").c_str(), 0600) == 0);  // nobody writes it: reading blocks for ever
    write_file(dir + "/c.json", config(dir + "/train.svm", dir + "/test.svm", dir + "/out"));
    const auto r = run_command("timeout 60 " + binary() + " train --config " + dir +
                               "/c.json --set sync.setup_timeout_s=2 --set data.num_features=0");
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);  // not killed by `timeout`
    CHECK(r.seconds < 30);
    CHECK_THAT(r.output, Catch::Contains("set-up has not finished after 2 s (sync.setup_timeout_s = 2)"));
}

TEST_CASE("data.num_features 0 on 2 ranks: the largest index of any rank's share sets it", "[train][sparse][mpi]") {
    const std::string dir = temp_dir("sparse-num-features");
    // Rank 1's share (the file's second half) holds the only index past 1024.
    auto rows = svm_rows(32, 50, 3);
    rows.back().features.push_back({1500, 1.0f});
    write_svm(dir + "/train.svm", rows);
    write_svm(dir + "/test.svm", svm_rows(16, 50, 4));
    write_file(dir + "/c.json", config(dir + "/train.svm", dir + "/test.svm", dir + "/out"));
    const auto r = run_command(mpirun(2) + binary() + " train --config " + dir +
                               "/c.json --set data.num_features=0 --set train.batch_size=4");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(read_json(dir + "/out/summary.json")["num_features"] == 2048);
}

TEST_CASE("a bad line found on one of 2 ranks while training: exit 2, one line naming it, the other rank says why",
          "[train][sparse][mpi]") {
    const std::string dir = temp_dir("sparse-bad-line-2ranks");
    write_svm(dir + "/train.svm", svm_rows(400, 50, 3));
    write_svm(dir + "/test.svm", svm_rows(16, 50, 4));
    {
        std::ofstream(dir + "/train.svm", std::ios::app) << "1 5:x\n";  // the last line: rank 1's share, found late
    }
    write_file(dir + "/c.json", config(dir + "/train.svm", dir + "/test.svm", dir + "/out"));
    const auto r = run_command("timeout 60 " + mpirun(2) + binary() + " train --config " + dir + "/c.json");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    const std::string line = dir + "/train.svm:401: bad feature value in '5:x'";
    const size_t first = r.output.find(line);
    REQUIRE(first != std::string::npos);
    CHECK(r.output.find(line, first + 1) == std::string::npos);  // said once, not again by the abort
    // Rank 0 gets the launcher's SIGTERM (when it is still running by then): its line must not read as a preemption.
    if (r.output.find("rank 0: SIGTERM received") != std::string::npos)
        CHECK_THAT(r.output, Catch::Contains("another rank failed: that rank's message says why"));
}

TEST_CASE("sparse set-up: an empty test file, an output.dir that is a file, a folder in use: exit 2 naming them",
          "[train][sparse]") {
    const std::string dir = temp_dir("sparse-setup-outputs");
    write_svm(dir + "/train.svm", svm_rows(64, 50, 3));
    write_file(dir + "/empty.svm", "# only a comment\n\n");
    write_file(dir + "/c.json", config(dir + "/train.svm", dir + "/empty.svm", dir + "/out"));
    auto r = run_command(binary() + " train --config " + dir + "/c.json");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(dir + "/empty.svm: data.test_file holds no rows"));
    CHECK(!std::filesystem::exists(dir + "/out"));

    write_svm(dir + "/test.svm", svm_rows(16, 50, 4));
    write_file(dir + "/afile", "");
    const std::string sets = " --set data.test_file=" + dir + "/test.svm --set output.dir=";
    r = run_command(binary() + " train --config " + dir + "/c.json" + sets + dir + "/afile");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("output.dir: '" + dir + "/afile' exists and is not a folder"));

    // Another process holds the folder (flock(1) runs the second run while it holds run.lock).
    std::filesystem::create_directories(dir + "/busy");
    r = run_command("flock " + dir + "/busy/run.lock " + binary() + " train --config " + dir + "/c.json" + sets + dir +
                    "/busy");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("output.dir " + dir + "/busy is in use by another run"));
    CHECK(!std::filesystem::exists(dir + "/busy/metrics.jsonl"));

    // An empty training file on one rank: no "fewer ranks" advice where there is one rank.
    r = run_command(binary() + " train --config " + dir + "/c.json" + sets + dir + "/empty-train --set data.train_file=" +
                    dir + "/empty.svm");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(dir + "/empty.svm: holds no rows; name a file with training rows"));
}

// output.dir as a run opens it, in-process: the lock that keeps a second run out (and goes with its holder), the
// trim of metrics.jsonl back to a resumed checkpoint, and a `latest` that is not a file.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fixtures.hpp"
#include "output_folder.hpp"
#include "preflight.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/train/checkpoint.hpp"

using namespace rt_test;
using namespace ringtrain;
using ringtrain::train::detail::keep_metrics_up_to;
using ringtrain::train::detail::OutputFolderLock;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

}  // namespace

TEST_CASE("one run at a time holds output.dir; the lock goes with its holder", "[train][output]") {
    const std::string dir = temp_dir("output-lock") + "/out";
    {
        OutputFolderLock first(dir);
        CHECK(fs::exists(dir + "/run.lock"));
        // A second holder (another open file, as another process has) is refused naming the folder and the pid.
        CHECK_THROWS_AS(OutputFolderLock(dir), InputError);
        try {
            OutputFolderLock second(dir);
        } catch (const InputError& e) {
            CHECK_THAT(e.what(), Catch::Contains("output.dir " + dir + " is in use by another run (process " +
                                                 std::to_string(::getpid())));
            CHECK_THAT(e.what(), Catch::Contains("choose another output.dir"));
        }
        OutputFolderLock moved = std::move(first);
        CHECK_THROWS_AS(OutputFolderLock(dir), InputError);  // still held, by the moved-to object
    }
    CHECK_NOTHROW(OutputFolderLock(dir));  // released with the last holder
}

TEST_CASE("a resumed run's metrics.jsonl keeps the lines up to its checkpoint", "[train][output]") {
    const std::string dir = temp_dir("output-metrics");
    const std::string path = dir + "/metrics.jsonl";
    // Epoch 1 ended at step 10; the run was killed at step 16 after a checkpoint at step 14 (epoch 2 under way).
    const std::string kept =
        R"({"type":"step","epoch":1,"step":5,"global_step":5,"loss":1.0})" "\n"
        R"({"type":"step","epoch":1,"step":10,"global_step":10,"loss":0.9})" "\n"
        R"({"type":"epoch","epoch":1,"global_step":10,"test_accuracy":0.5})" "\n"
        R"({"type":"step","epoch":2,"step":4,"global_step":14,"loss":0.8})" "\n";
    write_file(path, kept + "not json: goes\n" + R"({"type":"step","epoch":2,"step":6,"global_step":16,"loss":0.7})" "\n");
    CHECK(keep_metrics_up_to(path, /*epochs_done=*/1, /*global_step=*/14));  // epoch 1 has its line
    CHECK(slurp(path) == kept);
    CHECK(!fs::exists(path + ".tmp"));
    // Resumed from the end of epoch 1 (step 10): epoch 1's line stays, the steps after it go.
    CHECK(keep_metrics_up_to(path, 1, 10));
    CHECK(slurp(path).find(R"("global_step":14)") == std::string::npos);
    CHECK(slurp(path).find(R"({"type":"epoch","epoch":1)") != std::string::npos);
    // A checkpoint at an epoch's last step written before the epoch's line: that line is written again on resume.
    CHECK_FALSE(keep_metrics_up_to(path, 0, 10));
    CHECK(slurp(path).find(R"("type":"epoch")") == std::string::npos);
    CHECK(slurp(path).find(R"("global_step":10)") != std::string::npos);
    CHECK_FALSE(keep_metrics_up_to(dir + "/absent.jsonl", 0, 0));  // nothing to trim
    CHECK(!fs::exists(dir + "/absent.jsonl"));
}

TEST_CASE("a torn last line of metrics.jsonl goes, so the resumed run's first line is a line of its own",
          "[train][output]") {
    const std::string dir = temp_dir("output-metrics-torn");
    const std::string path = dir + "/metrics.jsonl";
    const std::string whole = R"({"type":"step","epoch":1,"step":8,"global_step":8,"loss":1.0})" "\n";
    write_file(path, whole + R"({"type":"step","epoch":1,"step":12,"global_step":12,"lo)");  // killed mid-write
    keep_metrics_up_to(path, 0, 8);
    CHECK(slurp(path) == whole);
}

TEST_CASE("a `latest` that is not a file is refused before the run trains", "[train][output]") {
    const std::string dir = temp_dir("output-latest");
    CHECK_NOTHROW(train::check_latest_pointer(dir));  // none yet
    write_file(dir + "/latest", "ckpt-000000010.bin\n");
    CHECK_NOTHROW(train::check_latest_pointer(dir));
    fs::remove(dir + "/latest");
    fs::create_directory(dir + "/latest");
    CHECK_THROWS_WITH(train::check_latest_pointer(dir), Catch::Contains(dir + "/latest: not a file") &&
                                                             Catch::Contains("remove it"));
}

TEST_CASE("output.dir's checkpoints/ is checked before training: a file there is refused at once", "[train][output]") {
    // Found at the first checkpoint, it cost the training up to there.
    const std::string dir = temp_dir("output-checkpoints-file");
    std::ofstream(dir + "/checkpoints") << "not a folder";
    try {
        train::detail::check_output_dir(dir);
        FAIL("a file named checkpoints in output.dir was accepted");
    } catch (const InputError& e) {
        CHECK_THAT(e.what(), Catch::Contains("output.dir: '" + dir + "/checkpoints' exists and is not a folder"));
    }
    fs::remove(dir + "/checkpoints");
    fs::create_directories(dir + "/checkpoints");
    CHECK_NOTHROW(train::detail::check_output_dir(dir));
}

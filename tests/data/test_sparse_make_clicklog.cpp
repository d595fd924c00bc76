// `ringtrain make-clicklog`: writes the file and the truth JSON; bad arguments exit 2 with one line.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/run_command.hpp"
#include "test_sparse_files.hpp"

using Catch::Contains;
using sparse_test::TempDir;

TEST_CASE("make-clicklog writes a file and its truth") {
    TempDir dir;
    const std::string bin = RINGTRAIN_BINARY;
    const auto r = rt_test::run_command(bin + " make-clicklog --format libsvm --rows 300 --features 50 --seed 4 --out " +
                                        dir.file("l.svm.gz") + " --truth " + dir.file("t.json"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto truth = nlohmann::json::parse(std::ifstream(dir.file("t.json")));
    CHECK(truth["rows"] == 300);
    CHECK(truth["num_features"] == 50);
    CHECK(truth["true_logloss"].get<double>() < truth["constant_logloss"].get<double>());
    CHECK(sparse_test::fs::file_size(dir.file("l.svm.gz")) > 100);
}

TEST_CASE("make-clicklog: bad arguments exit 2 with one line") {
    TempDir dir;
    const std::string bin = RINGTRAIN_BINARY + std::string(" make-clicklog ");
    std::ofstream(dir.file("afile")) << "a file, not a folder\n";
    for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
             {"--format criteo --rows 10", "needs --out"},
             {"--format csv --rows 10 --out x", "--format must be criteo or libsvm"},
             {"--format criteo --rows ten --out x", "--rows: 'ten' is not a number"},
             {"--format criteo --rows 10 --out x --hash-bits 40", "--hash-bits must be between 1 and 24"},
             {"--format criteo --rows 10 --out x --colour red", "unknown argument '--colour'"},
             {"--format criteo --rows 10 --out afile/x", "--out afile/x: cannot write in"},
             {"--format libsvm --rows 10 --out x --hash-bits 5", "--hash-bits is for --format criteo"},
             {"--format libsvm --rows 10 --out x --criteo-integers hash", "--criteo-integers is for --format criteo"},
             {"--format criteo --rows 10 --out x --features 5", "--features is for --format libsvm"},
             {"--format libsvm --rows 10 --out x --seed -1", "--seed: -1 is negative; it must be >= 0"},
             {"--format libsvm --rows 10 --out x --zipf -1", "--zipf must be a finite number > 0"},
             {"--format libsvm --rows 10 --out x --bias nan", "--bias must be a finite number"},
             {"--format libsvm --rows 10 --out x --weight-scale -1", "--weight-scale must be a finite number >= 0"}}) {
        const auto r = rt_test::run_command("cd " + dir.path.string() + " && " + bin + args);
        INFO(args << "\n" << r.output);
        CHECK(r.exit_code == 2);
        CHECK_THAT(r.output, Contains(says));
        CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    }
}

TEST_CASE("make-clicklog writes only new files: an existing --out or --truth, or --truth naming --out, is refused") {
    TempDir dir;
    const std::string bin = RINGTRAIN_BINARY + std::string(" make-clicklog --format criteo --rows 10 ");
    std::ofstream(dir.file("mine.txt")) << "precious\n";
    for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
             {"--out " + dir.file("mine.txt"), "--out " + dir.file("mine.txt") + " exists"},
             {"--out " + dir.file("new.txt") + " --truth " + dir.file("mine.txt"), "--truth " + dir.file("mine.txt") + " exists"},
             {"--out " + dir.file("new2.txt") + " --truth " + dir.file("new2.txt"), "--truth names the same file as --out"}}) {
        const auto r = rt_test::run_command(bin + args);
        INFO(args << "\n" << r.output);
        CHECK(r.exit_code == 2);
        CHECK_THAT(r.output, Contains(says));
        CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    }
    std::ifstream in(dir.file("mine.txt"));
    std::string kept;
    std::getline(in, kept);
    CHECK(kept == "precious");
    CHECK_FALSE(sparse_test::fs::exists(dir.file("new.txt")));
}

// The configs read data/criteo/train.txt: the folders of --out and --truth are made, and a truth file that cannot be
// written fails before the click log is written (it used to fail after, leaving the log).
TEST_CASE("make-clicklog makes the folders of --out and --truth, and checks both before writing") {
    TempDir dir;
    const std::string bin = RINGTRAIN_BINARY + std::string(" make-clicklog --format criteo --rows 10 ");
    auto r = rt_test::run_command(bin + "--out " + dir.file("data/criteo/train.txt") + " --truth " +
                                  dir.file("truths/criteo/t.json"));
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(sparse_test::fs::file_size(dir.file("data/criteo/train.txt")) > 100);
    CHECK(sparse_test::fs::exists(dir.file("truths/criteo/t.json")));
    r = rt_test::run_command(bin + "--out " + dir.file("new/log.txt") + " --truth /proc/ringtrain-no-folder/t.json");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains("--truth /proc/ringtrain-no-folder/t.json: cannot write in '/proc/ringtrain-no-folder'"));
    CHECK_FALSE(sparse_test::fs::exists(dir.file("new")));  // the --out folder made for it is taken back
    // The same file through a symlinked folder is the same file: refused, the log not overwritten by its truth.
    sparse_test::fs::create_directory_symlink(dir.path, dir.file("here"));
    r = rt_test::run_command(bin + "--out " + dir.file("here/s.txt") + " --truth " + dir.file("s.txt"));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains("--truth names the same file as --out"));
    r = rt_test::run_command(bin + "--out ''");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains("--out needs a file name"));
}

// Bad input to `ringtrain train` must give exit code 2, one line naming the key and the problem, and write nothing.
#include <catch2/catch.hpp>

#include <filesystem>

#include "support/run_command.hpp"

using namespace rt_test;
namespace fs = std::filesystem;

namespace {

struct BadCase {
    std::string what;
    std::string config;               // JSON text, with OUT standing for the output dir
    std::vector<std::string> sets;    // --set overrides
    std::string expect;               // substring of the error line
};

std::string replace_out(std::string text, const std::string& out) {
    for (size_t p; (p = text.find("OUT")) != std::string::npos;) text.replace(p, 3, out);
    return text;
}

}  // namespace

TEST_CASE("bad configs exit with code 2, name the key, and write nothing", "[cli]") {
    const std::string dir = temp_dir("badcfg");
    const std::string good_head = R"({"model": "models/logreg.json", "data": {"format": "synthetic", "synthetic_shape": [784]},)";
    const std::vector<BadCase> cases = {
        {"unknown key", good_head + R"("train": {"batch_sise": 10}, "output": {"dir": "OUT"}})", {}, "train.batch_sise: unknown key"},
        {"unknown section", good_head + R"("trainer": {}, "output": {"dir": "OUT"}})", {}, "trainer: unknown key"},
        {"wrong type", good_head + R"("train": {"batch_size": "ten"}, "output": {"dir": "OUT"}})", {}, "train.batch_size: expected an integer"},
        {"out of range", good_head + R"("train": {"batch_size": 0}, "output": {"dir": "OUT"}})", {}, "train.batch_size: 0 is out of range"},
        {"bad choice", good_head + R"("optimizer": {"name": "rmsprop"}, "output": {"dir": "OUT"}})", {}, "optimizer.name: 'rmsprop' is not one of"},
        {"missing model file", R"({"model": "models/nope.json", "data": {"format": "synthetic"}, "output": {"dir": "OUT"}})", {}, "models/nope.json' not found"},
        {"missing required key", R"({"data": {"format": "synthetic"}, "output": {"dir": "OUT"}})", {}, "model: missing"},
        {"missing data dir", R"({"model": "models/logreg.json", "data": {"dir": "/nonexistent/fmnist"}, "output": {"dir": "OUT"}})", {}, "/nonexistent/fmnist"},
        {"bad --set key", good_head + R"("output": {"dir": "OUT"}})", {"train.nope=3"}, "--set train.nope: unknown key"},
        {"bad --set value", good_head + R"("output": {"dir": "OUT"}})", {"train.epochs=-1"}, "--set train.epochs=-1: train.epochs: -1 is out of range"},
        {"bad --set type over a good file value", good_head + R"("train": {"epochs": 2}, "output": {"dir": "OUT"}})", {"train.epochs=abc"}, "--set train.epochs=abc: train.epochs: expected an integer"},
        {"bad --set form", good_head + R"("output": {"dir": "OUT"}})", {"train.epochs"}, "expected key=value"},
        {"not JSON", R"({"model": )", {}, "not valid JSON"},
        {"model/data mismatch", R"({"model": "models/lenet5.json", "data": {"format": "synthetic", "synthetic_shape": [100]}, "output": {"dir": "OUT"}})", {}, "expects samples of shape [1,28,28]"},
    };
    for (size_t i = 0; i < cases.size(); ++i) {
        const auto& c = cases[i];
        SECTION(c.what) {
            const std::string out = dir + "/out" + std::to_string(i);
            const std::string cfg = dir + "/cfg" + std::to_string(i) + ".json";
            write_file(cfg, replace_out(c.config, out));
            std::string cmd = "cd " + source_dir() + " && " + binary() + " train --config " + cfg;
            for (const auto& s : c.sets) cmd += " --set " + s;
            const auto r = run_command(cmd);
            INFO(r.output);
            CHECK(r.exit_code == 2);
            CHECK_THAT(r.output, Catch::Contains(c.expect));
            CHECK_THAT(r.output, Catch::Contains("ringtrain: error:"));
            CHECK(!fs::exists(out));
        }
    }
}

TEST_CASE("command-line misuse exits with code 2", "[cli]") {
    auto r = run_command(binary() + " train");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("--config"));
    r = run_command(binary() + " frobnicate");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("unknown command"));
    r = run_command(binary() + " train --config /nonexistent.json");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("config file not found"));
    r = run_command(binary() + " --help");
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("ringtrain train --config"));
    r = run_command(binary() + " train --help");
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("ringtrain train --config"));
}

// Each command takes its own flags; the accepted spellings keep working (`--flag=value` too).
TEST_CASE("flags a command takes are accepted in both spellings, others are named", "[cli]") {
    const std::string cfg = source_dir() + "/configs/logreg_fashion.json";
    const struct {
        std::string args;
        int exit_code;
        std::string expect;
    } cases[] = {
        {"info --config=" + cfg + " --set=train.epochs=2 --set train.seed=3", 0, "\"epochs\": 2"},
        {"info --checkpoint x.bin", 2, "--checkpoint: `ringtrain info` does not take this argument"},
        {"train --config", 2, "--config needs a value"},
    };
    for (const auto& c : cases) {
        const auto r = run_command(binary() + " " + c.args);
        INFO(c.args << "\n" << r.output);
        CHECK(r.exit_code == c.exit_code);
        CHECK_THAT(r.output, Catch::Contains(c.expect));
    }
}

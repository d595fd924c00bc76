// End to end with train.cpu_precision = "bf16": LeNet-5 on Fashion-MNIST (its second convolution has 6 input
// channels, so it runs in bf16) reaches the float32 run's accuracy bars (test_e2e_fashion), and summary.json says
// what ran. Its own main: where `ringtrain info` says this CPU cannot run bf16, it checks that asking for it ends the
// run with exit 2 naming the key, prints why it skips, and returns 77 (ctest: skipped).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "support/run_command.hpp"

using namespace rt_test;

namespace {
const char* kData = "/usr/share/datasets/fashion-mnist";

std::string train_command(const std::string& out) {
    return "cd " + source_dir() + " && " + binary() +
           " train --config configs/lenet5_fashion.json --set train.cpu_precision=bf16 --set output.progress=none"
           " --set output.dir=" + out;
}
}  // namespace

TEST_CASE("LeNet-5 with bf16 convolutions reaches 0.80 after 1 epoch and 0.84 after 2", "[e2e][bf16]") {
    if (!std::filesystem::exists(kData)) FAIL("Fashion-MNIST missing: run scripts/setup.sh");
    const std::string out = temp_dir("e2e-lenet-bf16");
    const auto r = run_command(train_command(out));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto s = read_json(out + "/summary.json");
    CHECK(s["cpu_precision"] == "bf16");
    CHECK(s["cpu_conv"].get<std::string>().find("oneDNN") != std::string::npos);
    std::vector<double> acc;
    for (const auto& line : read_jsonl(out + "/metrics.jsonl"))
        if (line["type"] == "epoch") acc.push_back(line["test_accuracy"].get<double>());
    REQUIRE(acc.size() == 2);
    CHECK(acc[0] >= 0.80);
    CHECK(acc[1] >= 0.84);
}

int main(int argc, char** argv) {
    const auto info = run_command(binary() + " info");
    if (info.exit_code != 0 || info.output.find("cpu precision: fp32 (bf16 available") == std::string::npos) {
        const std::string out = temp_dir("e2e-lenet-bf16-refused");
        const auto r = run_command(train_command(out));
        if (r.exit_code != 2 || r.output.find("train.cpu_precision") == std::string::npos) {
            std::fprintf(stderr, "FAILED: bf16 where `ringtrain info` says it cannot run did not end with exit 2 "
                                 "naming train.cpu_precision:\n%s\n%s\n", info.output.c_str(), r.output.c_str());
            return 1;
        }
        std::printf("SKIPPED: this CPU cannot run bf16 convolutions (`ringtrain info`: %s)\n", info.output.c_str());
        return 77;
    }
    return Catch::Session().run(argc, argv);
}

// configs/alexnet_cifar10.json with models/alexnet_cifar.json, on synthetic 3x32x32 data (no CIFAR-10 files needed):
// `info` accepts the config (with its CIFAR-10 normalisation and augmentation, which synthetic data would ignore, set
// back: they are refused there), and a few epochs on 32 samples build the model and lower the training loss.
#include <catch2/catch.hpp>

#include "fixtures.hpp"

using namespace rt_test;

TEST_CASE("the CIFAR-10 AlexNet config builds and learns on synthetic 3x32x32 data", "[train][image][alexnet]") {
    const std::string dir = temp_dir("alexnet_cifar");
    const std::string synthetic = " --config configs/alexnet_cifar10.json --set data.format=synthetic"
                                  " --set data.synthetic_shape=[3,32,32] --set data.mean=0 --set data.std=1"
                                  " --set data.augment.random_crop_padding=0 --set data.augment.hflip=false";
    auto r = run_command("cd " + source_dir() + " && " + binary() + " info" + synthetic);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    // Adam at a constant rate on 32 samples (two batches of 16) for five epochs: small enough for CI's CPUs.
    r = run_command("cd " + source_dir() + " && " + binary() + " train" + synthetic +
                    " --set data.synthetic_train_size=32 --set data.synthetic_test_size=32 --set train.batch_size=16"
                    " --set train.epochs=5 --set optimizer.name=adam --set optimizer.lr=0.001"
                    " --set optimizer.warmup_epochs=0 --set optimizer.schedule=constant --set optimizer.weight_decay=0"
                    " --set checkpoint.every_epochs=0 --set output.progress=none --set output.dir=" + dir + "/out");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto s = read_json(dir + "/out/summary.json");
    CHECK(s["model"] == "alexnet_cifar");
    CHECK(s["parameters"].get<int64_t>() > 5000000);
    std::vector<double> epoch_loss;
    for (const auto& m : read_jsonl(dir + "/out/metrics.jsonl"))
        if (m["type"] == "epoch") epoch_loss.push_back(m["train_loss"].get<double>());
    REQUIRE(epoch_loss.size() == 5);
    INFO("train loss per epoch: " << epoch_loss[0] << " ... " << epoch_loss[3] << ", " << epoch_loss[4]);
    CHECK(std::min(epoch_loss[3], epoch_loss[4]) < epoch_loss[0] - 0.3);
}

// The image_folder keys in the config and the run plan: per-channel data.mean / data.std (a number still works),
// image_size, channels, the data.augment section, and the checks that need several keys at once.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "datasets.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/data/cifar10.hpp"
#include "ringtrain/train/config.hpp"
#include "support/temp_dir.hpp"

using namespace ringtrain::train;
using nlohmann::json;
using Catch::Contains;

namespace {

const json kFolder = {{"model", "models/quality_cnn.json"},
                      {"data",
                       {{"format", "image_folder"},
                        {"train_dir", "photos/train"},
                        {"test_dir", "photos/test"},
                        {"image_size", {64, 48}},
                        {"mean", {0.485, 0.456, 0.406}},
                        {"std", {0.229, 0.224, 0.225}},
                        {"augment", {{"hflip", true}, {"random_crop_padding", 4}, {"random_resized_crop", {0.08, 1}}}},
                        {"skip_bad_files", true},
                        {"cache", true},
                        {"workers", 4}}}};

}  // namespace

TEST_CASE("image_folder keys parse into the plan; arrays stay arrays in the canonical form", "[train][config][image]") {
    const Config c = Config::from_json(kFolder, "test");
    const DataPlan& d = c.plan().data;
    CHECK(d.format == DataFormat::ImageFolder);
    CHECK(d.train_dir == "photos/train");
    CHECK(d.test_dir == "photos/test");
    CHECK(d.image_size == std::vector<int64_t>{64, 48});
    CHECK(d.channels == 3);
    CHECK_FALSE(d.mean.scalar);
    CHECK(d.mean.for_channels(3) == std::vector<float>{0.485f, 0.456f, 0.406f});
    CHECK(d.stddev.values == std::vector<double>{0.229, 0.224, 0.225});
    CHECK(d.augment_hflip);
    CHECK(d.augment_crop_padding == 4);
    CHECK(d.augment_resized_crop == std::vector<double>{0.08, 1.0});
    CHECK(d.skip_bad_files);
    CHECK(d.cache);
    CHECK(c.plan().to_json() == c.document());
    CHECK(c.plan().to_json()["data"]["mean"].is_array());
    // Off by default.
    json plain = kFolder;
    plain["data"].erase("augment");
    plain["data"].erase("skip_bad_files");
    const Config off = Config::from_json(plain, "test");
    const DataPlan& p = off.plan().data;
    CHECK_FALSE(p.augment_hflip);
    CHECK(p.augment_crop_padding == 0);
    CHECK(p.augment_resized_crop == std::vector<double>{0.0, 0.0});
    CHECK_FALSE(p.skip_bad_files);
}

TEST_CASE("a number for data.mean / data.std is every channel's, and stays a number", "[train][config][image]") {
    const Config c = Config::from_json(kFolder, "test", {"data.mean=0.5", "data.std=0.25"});
    CHECK(c.plan().data.mean.scalar);
    CHECK(c.plan().data.mean.for_channels(3) == std::vector<float>{0.5f, 0.5f, 0.5f});
    CHECK(c.plan().data.stddev.for_channels(1) == std::vector<float>{0.25f});
    CHECK(c.plan().to_json()["data"]["mean"] == 0.5);
    // IDX keeps its number; a one-entry array is the same value.
    const json idx = {{"model", "models/lenet5.json"}, {"data", {{"format", "idx"}, {"mean", 0.2860}}}};
    CHECK(Config::from_json(idx, "test").plan().data.mean.values == std::vector<double>{0.2860});
    CHECK(Config::from_json(idx, "test", {"data.mean=[0.3]"}).plan().data.mean.for_channels(1) ==
          std::vector<float>{0.3f});
    // Grey folders take one value per channel too.
    CHECK(Config::from_json(kFolder, "test", {"data.channels=1", "data.mean=[0.4]", "data.std=[0.2]"})
              .plan()
              .data.channels == 1);
}

TEST_CASE("image_folder key errors name the key", "[train][config][image]") {
    auto error = [](std::vector<std::string> sets) {
        try {
            Config::from_json(kFolder, "test", sets);
        } catch (const ringtrain::InputError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK_THAT(error({"data.channels=1"}), Contains("data.mean: 3 values for data.channels 1"));
    CHECK_THAT(error({"data.std=[1,2]"}), Contains("data.std: 2 values for data.channels 3"));
    CHECK_THAT(error({"data.test_dir="}), Contains("data.test_dir: missing"));
    CHECK_THAT(error({"data.image_size=[64,0]"}), Contains("--set data.image_size=[64,0]: data.image_size: [64,0] is not a size"));
    CHECK_THAT(error({"data.image_size=[1,2,3]"}), Contains("data.image_size: expected 2 entries"));
    CHECK_THAT(error({"data.augment.random_resized_crop=[0,0.5]"}), Contains("data.augment.random_resized_crop:"));
    CHECK_THAT(error({"data.augment.random_resized_crop=0.5"}), Contains("expected an array of numbers"));
    CHECK_THAT(error({"data.augment.hflip=1"}), Contains("data.augment.hflip: expected true or false"));
    CHECK_THAT(error({"data.mean=[]"}), Contains("data.mean: expected a number or an array of numbers"));
    CHECK_THAT(error({"data.mean=[0.5,\"a\",0.5]"}), Contains("data.mean: expected a number or an array of numbers"));
    CHECK(error({"data.augment.random_resized_crop=[0,0]"}) == "no error");  // off
}

namespace {

const json kCifar = {{"model", "models/alexnet_cifar.json"},
                     {"data",
                      {{"format", "cifar10"},
                       {"dir", "cifar-10-batches-bin"},
                       {"mean", {0.4914, 0.4822, 0.4465}},
                       {"std", {0.2470, 0.2435, 0.2616}},
                       {"augment", {{"hflip", true}, {"random_crop_padding", 4}, {"random_resized_crop", {0.5, 1}}}}}}};

std::string error_of(const json& doc, const std::vector<std::string>& sets) {
    try {
        Config::from_json(doc, "test", sets);
    } catch (const ringtrain::InputError& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST_CASE("cifar10 takes per-channel mean/std (3 values or one number) and the augmentation keys",
          "[train][config][image][cifar10]") {
    const DataPlan d = Config::from_json(kCifar, "test").plan().data;
    CHECK(d.mean.for_channels(3) == std::vector<float>{0.4914f, 0.4822f, 0.4465f});
    CHECK(d.stddev.values == std::vector<double>{0.2470, 0.2435, 0.2616});
    CHECK(d.augment_hflip);
    CHECK(d.augment_crop_padding == 4);
    CHECK(d.augment_resized_crop == std::vector<double>{0.5, 1.0});
    CHECK(Config::from_json(kCifar, "test", {"data.mean=0.5"}).plan().data.mean.for_channels(3) ==
          std::vector<float>{0.5f, 0.5f, 0.5f});
    // The values CIFAR-10 has anyway are accepted.
    CHECK(error_of(kCifar, {"data.image_size=[32,32]", "data.channels=3", "data.workers=4"}) == "no error");
    CHECK_THAT(error_of(kCifar, {"data.mean=[0.5,0.5]"}), Contains("--set data.mean=[0.5,0.5]: data.mean: 2 values; CIFAR-10 images have 3"));
    CHECK_THAT(error_of(kCifar, {"data.std=[0.2]"}), Contains("--set data.std=[0.2]: data.std: 1 values; CIFAR-10 images have 3"));
    CHECK_THAT(error_of(kCifar, {"data.augment.random_resized_crop=[0.9,0.2]"}),
               Contains("data.augment.random_resized_crop: [0.9, 0.2] is not [min_scale, max_scale]"));
}

TEST_CASE("image keys a format would ignore are refused, naming the key", "[train][config][image]") {
    // cifar10: what it does not do.
    CHECK_THAT(error_of(kCifar, {"data.image_size=[64,64]"}), Contains("data.image_size: [64,64], but CIFAR-10"));
    CHECK_THAT(error_of(kCifar, {"data.channels=1"}), Contains("data.channels: 1, but CIFAR-10 images are RGB"));
    CHECK_THAT(error_of(kCifar, {"data.cache=true"}), Contains("data.cache: not used with data.format 'cifar10'"));
    CHECK_THAT(error_of(kCifar, {"data.skip_bad_files=true"}), Contains("data.skip_bad_files: not used"));
    CHECK_THAT(error_of(kCifar, {"data.test_dir=x"}), Contains("data.test_dir: not used"));
    // idx and synthetic: no image key at all (data.workers splits their large batches, so it stays).
    const json idx = {{"model", "models/lenet5.json"}, {"data", {{"format", "idx"}}}};
    const json synthetic = {{"model", "models/logreg.json"}, {"data", {{"format", "synthetic"}}}};
    for (const json& doc : {idx, synthetic}) {
        const std::string f = doc["data"]["format"].get<std::string>();
        INFO(f);
        const std::string tail = ": not used with data.format '" + f + "'";
        CHECK_THAT(error_of(doc, {"data.augment.hflip=true"}), Contains("data.augment.hflip" + tail));
        CHECK_THAT(error_of(doc, {"data.augment.random_crop_padding=4"}),
                   Contains("data.augment.random_crop_padding" + tail));
        CHECK_THAT(error_of(doc, {"data.augment.random_resized_crop=[0.5,1]"}),
                   Contains("data.augment.random_resized_crop" + tail));
        CHECK_THAT(error_of(doc, {"data.image_size=[28,28]"}), Contains("data.image_size" + tail));
        CHECK_THAT(error_of(doc, {"data.channels=1"}), Contains("data.channels" + tail));
        CHECK_THAT(error_of(doc, {"data.skip_bad_files=true"}), Contains("data.skip_bad_files" + tail));
        CHECK_THAT(error_of(doc, {"data.cache=true"}), Contains("data.cache" + tail));
        CHECK_THAT(error_of(doc, {"data.train_dir=x"}), Contains("data.train_dir" + tail));
        CHECK(error_of(doc, {"data.workers=4"}) == "no error");
    }
    CHECK_THAT(error_of(synthetic, {"data.mean=0.5"}), Contains("data.mean: not used with data.format 'synthetic'"));
    CHECK_THAT(error_of(synthetic, {"data.std=[1,1,1]"}), Contains("data.std: not used"));
    CHECK(error_of(synthetic, {"data.mean=0", "data.std=1"}) == "no error");  // the neutral values
    CHECK(error_of(idx, {"data.mean=0.3", "data.std=0.2"}) == "no error");
}

TEST_CASE("make_datasets gives cifar10's training split the augmentation and per-channel normalisation, the test "
          "split only the normalisation", "[train][config][image][cifar10]") {
    // The six standard files at their full size, as sparse files of zero records; the first record of each split
    // holds noise (so a crop or a flip shows).
    rt_test::TempDir dir{"cifar_plan"};
    const auto size = static_cast<std::uintmax_t>(ringtrain::data::kCifar10RecordsPerFile * ringtrain::data::kCifar10RecordBytes);
    for (const char* name : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                             "data_batch_5.bin", "test_batch.bin"}) {
        std::string record(static_cast<size_t>(ringtrain::data::kCifar10RecordBytes), '\0');
        for (size_t i = 1; i < record.size(); ++i) record[i] = static_cast<char>(ringtrain::mix64(i));
        std::ofstream(dir.file(name), std::ios::binary) << record;
        std::filesystem::resize_file(dir.file(name), size);
    }
    const Config c = Config::from_json(kCifar, "test", {"data.dir=" + dir.path.string()});
    const detail::Datasets d = detail::make_datasets(c.plan());
    std::vector<float> plain(3072), x(3072);
    // The normalisation: per channel, on both splits.
    for (const auto* split : {d.train.get(), d.test.get()}) {
        split->read(0, plain.data());
        const float byte = static_cast<uint8_t>(ringtrain::mix64(1));  // channel 0, pixel 0
        // (v / 255 - mean) / std, as one multiply-add within 5e-7 (normalisation_table).
        CHECK(plain[0] == Approx((byte / 255.0f - 0.4914f) / 0.2470f).epsilon(1e-6).margin(1e-6));
        CHECK(plain[2048] ==
              Approx((static_cast<uint8_t>(ringtrain::mix64(2049)) / 255.0f - 0.4465f) / 0.2616f).epsilon(1e-6).margin(1e-6));
    }
    // Training reads are augmented (most draws change the sample), test reads never.
    int changed = 0;
    for (uint64_t key = 0; key < 8; ++key) {
        d.test->read(0, plain.data());
        d.test->read_training(0, x.data(), key);
        CHECK(x == plain);
        d.train->read(0, plain.data());
        d.train->read_training(0, x.data(), key);
        changed += x != plain;
    }
    CHECK(changed >= 6);
}

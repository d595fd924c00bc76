// CIFAR-10 binary reader: small files written at test time (records, channel order, labels, per-channel
// normalisation), the size and label checks with the file named, the standard folder layout, and the training
// augmentation (pad-and-crop, flip, random resized crop) against a direct reference.
#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/data/cifar10.hpp"
#include "ringtrain/data/image_transform.hpp"
#include "ringtrain/data/sharded_loader.hpp"
#include "support/temp_dir.hpp"

using namespace ringtrain;
using namespace ringtrain::data;
namespace fs = std::filesystem;
using rt_test::TempDir;
using Catch::Contains;

namespace {

// Record r of a test file: label (first + r) % 10; pixel i of channel c = (r + 3c + i) % 256.
std::vector<uint8_t> records(int64_t n, int first = 0) {
    std::vector<uint8_t> b;
    for (int64_t r = 0; r < n; ++r) {
        b.push_back(static_cast<uint8_t>((first + r) % 10));
        for (int c = 0; c < 3; ++c)
            for (int i = 0; i < 1024; ++i) b.push_back(static_cast<uint8_t>((r + 3 * c + i) % 256));
    }
    return b;
}

void write(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const InputError& e) {
        return e.what();
    }
    return "no InputError";
}

}  // namespace

TEST_CASE("cifar10 reads records in file order, red/green/blue planes, labels and per-channel normalisation", "[data][cifar10]") {
    TempDir dir{"cifar"};
    write(dir.file("a.bin"), records(3, 0));
    write(dir.file("b.bin"), records(2, 7));
    Cifar10Options norm;
    norm.mean = {0.5f, 0.25f, 0.125f};
    norm.stddev = {0.25f, 0.5f, 0.2f};
    auto ds = load_cifar10_files({dir.file("a.bin"), dir.file("b.bin")}, 0, norm);
    REQUIRE(ds->size() == 5);
    REQUIRE(ds->sample_shape() == Shape{3, 32, 32});
    REQUIRE(ds->num_classes() == 10);
    std::vector<float> x(3 * 32 * 32);
    const float labels[] = {0, 1, 2, 7, 8};
    for (int64_t s = 0; s < 5; ++s) {
        CAPTURE(s);
        REQUIRE(ds->read(s, x.data()) == labels[s]);
        const int64_t r = s < 3 ? s : s - 3;  // record within its file
        for (int c = 0; c < 3; ++c)
            for (int i : {0, 1, 500, 1023}) {
                const float byte = float((r + 3 * c + i) % 256);
                REQUIRE(x[c * 1024 + i] ==
                        Approx((byte / 255.0f - norm.mean[c]) / norm.stddev[c]).epsilon(1e-6).margin(1e-6));
            }
    }
    REQUIRE_THROWS_AS(ds->read(5, x.data()), Error);
    REQUIRE_THAT(ds->description(), Contains("a.bin") && Contains("5 samples"));
}

TEST_CASE("cifar10 size and label errors name the file and the expected size", "[data][cifar10]") {
    TempDir dir{"cifar"};
    auto bytes = records(2);
    bytes.pop_back();  // truncated
    write(dir.file("short.bin"), bytes);
    const std::string e1 = error_of([&] { load_cifar10_files({dir.file("short.bin")}, 0); });
    REQUIRE_THAT(e1, Contains(dir.file("short.bin")) && Contains("6145 bytes") && Contains("multiple of 3073"));

    write(dir.file("three.bin"), records(3));
    const std::string e2 = error_of([&] { load_cifar10_files({dir.file("three.bin")}, 2); });
    REQUIRE_THAT(e2, Contains(dir.file("three.bin")) && Contains("expected 6146 bytes (2 records"));

    write(dir.file("empty.bin"), {});
    REQUIRE_THAT(error_of([&] { load_cifar10_files({dir.file("empty.bin")}, 0); }), Contains("empty.bin"));

    auto bad = records(2);
    bad[3073] = 10;  // the second record's label
    write(dir.file("label.bin"), bad);
    REQUIRE_THAT(error_of([&] { load_cifar10_files({dir.file("label.bin")}, 0); }),
                 Contains("label.bin") && Contains("record 1") && Contains("label 10"));
}

TEST_CASE("cifar10 folder: standard names, 10000 records per file, missing files named", "[data][cifar10]") {
    TempDir dir{"cifar"};
    REQUIRE(cifar10_file_names(Split::Train).size() == 5);
    REQUIRE(cifar10_file_names(Split::Test) == std::vector<std::string>{"test_batch.bin"});
    // A full-size test file (30 MB, written in well under a second) loads.
    write(dir.file("test_batch.bin"), records(kCifar10RecordsPerFile));
    auto test = load_cifar10_dataset(dir.path.string(), Split::Test);
    REQUIRE(test->size() == kCifar10RecordsPerFile);
    // A standard file with a wrong record count is refused with the exact expected size.
    write(dir.file("data_batch_1.bin"), records(4));
    REQUIRE_THAT(error_of([&] { load_cifar10_dataset(dir.path.string(), Split::Train); }),
                 Contains("data_batch_1.bin") && Contains("12292 bytes, expected 30730000 bytes"));
    // A missing file is named, with where to get the data set.
    fs::remove(dir.file("test_batch.bin"));
    REQUIRE_THAT(error_of([&] { load_cifar10_dataset(dir.path.string(), Split::Test); }),
                 Contains("test_batch.bin") && Contains("not found") && Contains("cs.toronto.edu"));
}

namespace {

// n records of pseudo-random pixels (so every crop offset and flip shows), labels r % 10.
std::vector<uint8_t> noise_records(int64_t n) {
    std::vector<uint8_t> b;
    for (int64_t r = 0; r < n; ++r) {
        b.push_back(static_cast<uint8_t>(r % 10));
        for (int64_t i = 0; i < 3072; ++i) b.push_back(static_cast<uint8_t>(mix64(uint64_t(r) * 4096 + uint64_t(i))));
    }
    return b;
}

// torchvision's (v / 255 - mean) / std; ours is one multiply-add within 5e-7 of it (normalisation_table), while a
// wrong pixel is off by at least 1 / (255 std).
Approx normalised(uint8_t v, const Cifar10Options& o, int c) {
    return Approx((static_cast<float>(v) / 255.0f - o.mean[c]) / o.stddev[c]).epsilon(1e-6).margin(1e-6);
}

// Pixel (c, y, x) of record r in a file of noise_records.
uint8_t pixel(const std::vector<uint8_t>& file, int64_t r, int c, int y, int x) {
    return file[static_cast<size_t>(r * kCifar10RecordBytes + 1 + c * 1024 + y * 32 + x)];
}

Cifar10Options per_channel() {
    Cifar10Options o;
    o.mean = {0.4914f, 0.4822f, 0.4465f};
    o.stddev = {0.2470f, 0.2435f, 0.2616f};
    return o;
}

}  // namespace

TEST_CASE("cifar10 pad-and-crop and flip: the documented draws, the normalised zero as padding", "[data][cifar10][augment]") {
    TempDir dir{"cifar_aug"};
    const auto file = noise_records(6);
    write(dir.file("a.bin"), file);
    Cifar10Options o = per_channel();
    o.augment.random_crop_padding = 4;
    o.augment.hflip = true;
    const auto ds = load_cifar10_files({dir.file("a.bin")}, 0, o);
    std::vector<float> x(3072);
    int flips = 0, shifted = 0, draws = 0;
    for (int64_t r = 0; r < 6; ++r)
        for (int64_t epoch = 0; epoch < 5; ++epoch) {
            const uint64_t key = augment_draw_key(7, epoch, r);
            REQUIRE(ds->read_training(r, x.data(), key) == float(r % 10));
            // The reference: image_transform.hpp's order (top offset, left offset, then the flip), drawn directly.
            Rng rng(key);
            const int dy = static_cast<int>(rng.below(9)) - 4, dx = static_cast<int>(rng.below(9)) - 4;
            const bool flip = rng.uniform() < 0.5f;
            flips += flip;
            shifted += dy != 0 || dx != 0;
            ++draws;
            for (int c = 0; c < 3; ++c)
                for (int y = 0; y < 32; ++y)
                    for (int xo = 0; xo < 32; ++xo) {
                        const int sy = y + dy, sx = (flip ? 31 - xo : xo) + dx;  // source row and column
                        const bool inside = sy >= 0 && sy < 32 && sx >= 0 && sx < 32;
                        const Approx want = normalised(inside ? pixel(file, r, c, sy, sx) : 0, o, c);
                        INFO("record " << r << " epoch " << epoch << " c " << c << " y " << y << " x " << xo);
                        REQUIRE(x[static_cast<size_t>(c * 1024 + y * 32 + xo)] == want);
                    }
        }
    // The draws did flip and shift (a reader that ignored the augmentation would have failed above).
    CHECK(flips > 0);
    CHECK(flips < draws);
    CHECK(shifted > 0);
}

TEST_CASE("cifar10 random_resized_crop: the box drawn by random_resized_crop_box, resized back to 32x32",
          "[data][cifar10][augment]") {
    TempDir dir{"cifar_rrc"};
    const auto file = noise_records(3);
    write(dir.file("a.bin"), file);
    Cifar10Options o = per_channel();
    o.augment.resized_crop_min_scale = 0.3f;
    o.augment.resized_crop_max_scale = 0.8f;
    o.augment.hflip = true;
    const auto ds = load_cifar10_files({dir.file("a.bin")}, 0, o);
    std::vector<float> x(3072);
    for (int64_t r = 0; r < 3; ++r)
        for (int64_t epoch = 0; epoch < 3; ++epoch) {
            const uint64_t key = augment_draw_key(1, epoch, r);
            ds->read_training(r, x.data(), key);
            Rng rng(key);
            const CropBox box = random_resized_crop_box(32, 32, 0.3f, 0.8f, rng);
            const bool flip = rng.uniform() < 0.5f;
            REQUIRE(box.height * box.width < 32 * 32);  // scale <= 0.8: a real crop
            // The box cut out of the record (interleaved RGB), resized with resize_image, flipped, normalised.
            Image crop{box.height, box.width, 3, {}};
            for (int y = 0; y < box.height; ++y)
                for (int xx = 0; xx < box.width; ++xx)
                    for (int c = 0; c < 3; ++c) crop.pixels.push_back(pixel(file, r, c, box.top + y, box.left + xx));
            const Image resized = resize_image(crop, 32, 32);
            for (int c = 0; c < 3; ++c)
                for (int y = 0; y < 32; ++y)
                    for (int xo = 0; xo < 32; ++xo) {
                        const int sx = flip ? 31 - xo : xo;
                        const uint8_t v = resized.pixels[static_cast<size_t>((y * 32 + sx) * 3 + c)];
                        INFO("record " << r << " epoch " << epoch << " c " << c << " y " << y << " x " << xo);
                        REQUIRE(x[static_cast<size_t>(c * 1024 + y * 32 + xo)] == normalised(v, o, c));
                    }
        }
}

TEST_CASE("cifar10 augmentation is a function of (seed, epoch, index) only; evaluation reads are never augmented",
          "[data][cifar10][augment]") {
    TempDir dir{"cifar_keys"};
    write(dir.file("a.bin"), noise_records(4));
    Cifar10Options plain = per_channel();
    Cifar10Options augmented = plain;
    augmented.augment.random_crop_padding = 4;
    augmented.augment.hflip = true;
    const auto aug = load_cifar10_files({dir.file("a.bin")}, 0, augmented);
    const auto ref = load_cifar10_files({dir.file("a.bin")}, 0, plain);
    std::vector<float> a(3072), b(3072), c(3072);
    for (int64_t r = 0; r < 4; ++r) {
        // The same key: the same sample, whichever read came before (another sample, another epoch).
        aug->read_training(r, a.data(), augment_draw_key(5, 2, r));
        aug->read_training((r + 1) % 4, c.data(), augment_draw_key(5, 3, (r + 1) % 4));
        aug->read_training(r, b.data(), augment_draw_key(5, 2, r));
        REQUIRE(a == b);
        // Other epochs draw otherwise: of 8 epochs, some differ from epoch 2.
        int differ = 0;
        for (int64_t e = 0; e < 8; ++e) {
            aug->read_training(r, c.data(), augment_draw_key(5, e, r));
            differ += c != a;
        }
        CHECK(differ >= 4);
        // read() (the test split, evaluation) is the unaugmented sample; without augmentation a training read is too.
        aug->read(r, a.data());
        ref->read(r, b.data());
        REQUIRE(a == b);
        ref->read_training(r, c.data(), augment_draw_key(5, 2, r));
        REQUIRE(c == b);
    }
}

TEST_CASE("cifar10 unaugmented reads are bitwise transform_image's; bad options are InputErrors", "[data][cifar10]") {
    TempDir dir{"cifar_same"};
    const auto file = noise_records(2);
    write(dir.file("a.bin"), file);
    const Cifar10Options o = per_channel();
    const auto ds = load_cifar10_files({dir.file("a.bin")}, 0, o);
    ImageTransformOptions t;
    t.height = t.width = 32;
    t.mean = o.mean;
    t.stddev = o.stddev;
    Image image{32, 32, 3, {}};
    for (int y = 0; y < 32; ++y)
        for (int xx = 0; xx < 32; ++xx)
            for (int c = 0; c < 3; ++c) image.pixels.push_back(pixel(file, 1, c, y, xx));
    std::vector<float> a(3072), b(3072);
    ds->read(1, a.data());
    transform_image(image, t, nullptr, b.data());
    REQUIRE(a == b);

    Cifar10Options two = o;
    two.mean = {0.5f, 0.5f};
    REQUIRE_THAT(error_of([&] { load_cifar10_files({dir.file("a.bin")}, 0, two); }), Contains("data.mean"));
    Cifar10Options zero = o;
    zero.stddev = {0.2f, 0.0f, 0.2f};
    REQUIRE_THAT(error_of([&] { load_cifar10_files({dir.file("a.bin")}, 0, zero); }), Contains("data.std"));
}

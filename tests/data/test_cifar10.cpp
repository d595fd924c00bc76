// CIFAR-10 binary reader: small files written at test time (records, channel order, labels, normalisation), the
// size and label checks with the file named, and the standard folder layout.
#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "ringtrain/core/error.hpp"
#include "support/temp_dir.hpp"
#include "ringtrain/data/cifar10.hpp"

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

TEST_CASE("cifar10 reads records in file order, red/green/blue planes, labels and normalisation", "[data][cifar10]") {
    TempDir dir{"cifar"};
    write(dir.file("a.bin"), records(3, 0));
    write(dir.file("b.bin"), records(2, 7));
    Normalization norm;
    norm.mean = 0.5f;
    norm.stddev = 0.25f;
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
                REQUIRE(x[c * 1024 + i] == Approx((byte / 255.0f - 0.5f) / 0.25f));
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

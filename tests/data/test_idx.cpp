#include <catch2/catch.hpp>
#include <zlib.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "ringtrain/core/error.hpp"
#include "support/temp_dir.hpp"
#include "ringtrain/data/idx.hpp"

using namespace ringtrain;
using namespace ringtrain::data;
namespace fs = std::filesystem;
using rt_test::TempDir;
using Catch::Contains;

namespace {

std::vector<uint8_t> idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& values) {
    std::vector<uint8_t> b = {0, 0, type, static_cast<uint8_t>(dims.size())};
    for (uint32_t d : dims) {
        b.push_back(uint8_t(d >> 24));
        b.push_back(uint8_t(d >> 16));
        b.push_back(uint8_t(d >> 8));
        b.push_back(uint8_t(d));
    }
    b.insert(b.end(), values.begin(), values.end());
    return b;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
    if (path.size() > 3 && path.substr(path.size() - 3) == ".gz") {
        gzFile f = gzopen(path.c_str(), "wb");
        REQUIRE(f != nullptr);
        if (!bytes.empty()) REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == int(bytes.size()));
        REQUIRE(gzclose(f) == Z_OK);
    } else {
        std::ofstream f(path, std::ios::binary);
        f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        REQUIRE(f.good());
    }
}

std::vector<uint8_t> iota_bytes(size_t n, int mult = 1) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * mult) % 256);
    return v;
}

// Writes a small IDX image/label pair (n images of rows x cols) into dir with the given prefix.
void write_pair(const TempDir& dir, const std::string& prefix, uint32_t n, uint32_t rows, uint32_t cols,
                bool gz_images, bool gz_labels, uint32_t label_count = 0, int num_classes = 3) {
    if (label_count == 0) label_count = n;
    std::vector<uint8_t> labels(label_count);
    for (uint32_t i = 0; i < label_count; ++i) labels[i] = static_cast<uint8_t>(i % num_classes);
    write_file(dir.file(prefix + "-images-idx3-ubyte" + (gz_images ? ".gz" : "")),
               idx_bytes(0x08, {n, rows, cols}, iota_bytes(size_t(n) * rows * cols, 7)));
    write_file(dir.file(prefix + "-labels-idx1-ubyte" + (gz_labels ? ".gz" : "")),
               idx_bytes(0x08, {label_count}, labels));
}

}  // namespace

TEST_CASE("read_idx_file reads plain and gzip files", "[data][idx]") {
    TempDir dir;
    const auto values = iota_bytes(5 * 4 * 3);
    for (const char* name : {"a-idx3-ubyte", "a-idx3-ubyte.gz"}) {
        CAPTURE(name);
        write_file(dir.file(name), idx_bytes(0x08, {5, 4, 3}, values));
        IdxArray a = read_idx_file(dir.file(name));
        REQUIRE(a.dims == std::vector<int64_t>{5, 4, 3});
        REQUIRE(a.values == values);
    }
    write_file(dir.file("labels.gz"), idx_bytes(0x08, {6}, {0, 1, 2, 9, 255, 3}));
    IdxArray l = read_idx_file(dir.file("labels.gz"));
    REQUIRE(l.dims == std::vector<int64_t>{6});
    REQUIRE(l.values == std::vector<uint8_t>{0, 1, 2, 9, 255, 3});
}

TEST_CASE("read_idx_file rejects truncated files naming the file and the sizes", "[data][idx]") {
    TempDir dir;
    auto bytes = idx_bytes(0x08, {5, 4, 3}, iota_bytes(50));  // header says 60 value bytes, 50 present
    for (const char* name : {"short-idx3-ubyte", "short-idx3-ubyte.gz"}) {
        CAPTURE(name);
        write_file(dir.file(name), bytes);
        REQUIRE_THROWS_AS(read_idx_file(dir.file(name)), InputError);
        REQUIRE_THROWS_WITH(read_idx_file(dir.file(name)), Contains(name) && Contains("truncated") &&
                                                               Contains("header says 5x4x3 = 60 bytes") &&
                                                               Contains("holds 50") && Contains("re-download"));
    }
    // Ends inside the header, and an empty file.
    write_file(dir.file("hdr-idx3-ubyte"), {0, 0, 8, 3, 0, 0});
    REQUIRE_THROWS_WITH(read_idx_file(dir.file("hdr-idx3-ubyte")),
                        Contains("hdr-idx3-ubyte") && Contains("truncated"));
    write_file(dir.file("empty-idx1-ubyte"), {});
    REQUIRE_THROWS_WITH(read_idx_file(dir.file("empty-idx1-ubyte")),
                        Contains("empty-idx1-ubyte") && Contains("truncated"));
}

TEST_CASE("read_idx_file rejects a gzip stream cut short", "[data][idx]") {
    TempDir dir;
    write_file(dir.file("full.gz"), idx_bytes(0x08, {200, 10, 10}, iota_bytes(20000, 13)));
    std::ifstream in(dir.file("full.gz"), std::ios::binary);
    std::vector<char> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    gz.resize(gz.size() / 2);
    std::ofstream(dir.file("cut-idx3-ubyte.gz"), std::ios::binary).write(gz.data(), std::streamsize(gz.size()));
    REQUIRE_THROWS_AS(read_idx_file(dir.file("cut-idx3-ubyte.gz")), InputError);
    REQUIRE_THROWS_WITH(read_idx_file(dir.file("cut-idx3-ubyte.gz")),
                        Contains("cut-idx3-ubyte.gz") && Contains("truncated"));
}

TEST_CASE("read_idx_file rejects a wrong magic number, element type or trailing data", "[data][idx]") {
    TempDir dir;
    write_file(dir.file("text-idx3-ubyte"), std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
    REQUIRE_THROWS_AS(read_idx_file(dir.file("text-idx3-ubyte")), InputError);
    REQUIRE_THROWS_WITH(read_idx_file(dir.file("text-idx3-ubyte")),
                        Contains("text-idx3-ubyte") && Contains("wrong magic") && Contains("0x68656C6C"));
    write_file(dir.file("dims-idx3-ubyte.gz"), {0, 0, 8, 9, 0, 0, 0, 1});
    REQUIRE_THROWS_WITH(read_idx_file(dir.file("dims-idx3-ubyte.gz")),
                        Contains("dims-idx3-ubyte.gz") && Contains("wrong magic"));
    write_file(dir.file("float-idx1"), idx_bytes(0x0D, {1}, {0, 0, 0, 0}));
    REQUIRE_THROWS_WITH(read_idx_file(dir.file("float-idx1")),
                        Contains("float-idx1") && Contains("element type 0x0D") && Contains("0x08"));
    write_file(dir.file("long-idx1-ubyte"), idx_bytes(0x08, {3}, {1, 2, 3, 4}));
    REQUIRE_THROWS_WITH(read_idx_file(dir.file("long-idx1-ubyte")),
                        Contains("long-idx1-ubyte") && Contains("header says 3 = 3 bytes") &&
                            Contains("more data"));
}

TEST_CASE("read_idx_file reports a missing file with what to do", "[data][idx]") {
    TempDir dir;
    REQUIRE_THROWS_AS(read_idx_file(dir.file("nope-idx3-ubyte.gz")), InputError);
    REQUIRE_THROWS_WITH(read_idx_file(dir.file("nope-idx3-ubyte.gz")),
                        Contains("nope-idx3-ubyte.gz") && Contains("not found") &&
                            Contains("dataset-fashion-mnist") && Contains("data.dir"));
}

TEST_CASE("load_idx_dataset loads and normalises a split", "[data][idx]") {
    TempDir dir;
    write_pair(dir, "train", 6, 4, 5, /*gz_images=*/false, /*gz_labels=*/true);
    write_pair(dir, "t10k", 3, 4, 5, /*gz_images=*/true, /*gz_labels=*/false, 0, 2);

    auto train = load_idx_dataset(dir.path.string(), Split::Train);
    REQUIRE(train->size() == 6);
    REQUIRE(train->sample_shape() == Shape{1, 4, 5});
    REQUIRE(train->num_classes() == 3);
    REQUIRE_THAT(train->description(), Contains(dir.path.string()) && Contains("train"));
    const auto pixels = iota_bytes(6 * 4 * 5, 7);
    std::vector<float> x(20);
    for (int64_t i = 0; i < 6; ++i) {
        REQUIRE(train->read(i, x.data()) == float(i % 3));
        for (int j = 0; j < 20; ++j) REQUIRE(x[j] == Approx(pixels[i * 20 + j] / 255.0f));
    }

    Normalization norm;
    norm.mean = 0.5f;
    norm.stddev = 0.25f;
    auto test = load_idx_dataset(dir.path.string(), Split::Test, norm);
    REQUIRE(test->size() == 3);
    REQUIRE(test->num_classes() == 2);
    REQUIRE_THAT(test->description(), Contains("test"));
    REQUIRE(test->read(2, x.data()) == 0.0f);
    for (int j = 0; j < 20; ++j) REQUIRE(x[j] == Approx((pixels[40 + j] / 255.0f - 0.5f) / 0.25f));

    Normalization raw;
    raw.scale_to_unit = false;
    auto r = load_idx_dataset(dir.path.string(), Split::Train, raw);
    r->read(1, x.data());
    REQUIRE(x[3] == float(pixels[23]));
}

TEST_CASE("load_idx_dataset: num_classes is at least 2", "[data][idx]") {
    TempDir dir;
    write_pair(dir, "train", 4, 2, 2, true, true, 0, /*num_classes=*/1);
    REQUIRE(load_idx_dataset(dir.path.string(), Split::Train)->num_classes() == 2);
}

TEST_CASE("load_idx_dataset rejects a label count that differs from the image count", "[data][idx]") {
    TempDir dir;
    write_pair(dir, "train", 6, 4, 5, true, true, /*label_count=*/5);
    REQUIRE_THROWS_AS(load_idx_dataset(dir.path.string(), Split::Train), InputError);
    REQUIRE_THROWS_WITH(load_idx_dataset(dir.path.string(), Split::Train),
                        Contains("train-labels-idx1-ubyte.gz") && Contains("label count mismatch") &&
                            Contains("5 labels") && Contains("6 images"));
}

TEST_CASE("load_idx_dataset reports missing files and directories", "[data][idx]") {
    TempDir dir;
    REQUIRE_THROWS_AS(load_idx_dataset(dir.path.string(), Split::Train), InputError);
    REQUIRE_THROWS_WITH(load_idx_dataset(dir.path.string(), Split::Train),
                        Contains("train-images-idx3-ubyte") && Contains("not found") &&
                            Contains("dataset-fashion-mnist") && Contains("data.dir"));
    // Images present, labels missing.
    write_pair(dir, "t10k", 2, 2, 2, true, true);
    fs::remove(dir.file("t10k-labels-idx1-ubyte.gz"));
    REQUIRE_THROWS_WITH(load_idx_dataset(dir.path.string(), Split::Test),
                        Contains("t10k-labels-idx1-ubyte") && Contains("not found"));
    REQUIRE_THROWS_WITH(load_idx_dataset(dir.file("no-such-dir"), Split::Test),
                        Contains("no-such-dir") && Contains("not found") && Contains("data.dir"));
}

TEST_CASE("load_idx_dataset rejects swapped image and label files", "[data][idx]") {
    TempDir dir;
    write_file(dir.file("train-images-idx3-ubyte"), idx_bytes(0x08, {3}, {0, 1, 2}));
    write_file(dir.file("train-labels-idx1-ubyte"), idx_bytes(0x08, {3}, {0, 1, 2}));
    REQUIRE_THROWS_WITH(load_idx_dataset(dir.path.string(), Split::Train),
                        Contains("train-images-idx3-ubyte") && Contains("3-dimensional"));
}

TEST_CASE("Fashion-MNIST from the Debian package loads", "[data][idx][fashion]") {
    const std::string dir = "/usr/share/datasets/fashion-mnist";
    if (!fs::exists(dir + "/train-images-idx3-ubyte.gz") && !fs::exists(dir + "/train-images-idx3-ubyte")) {
        WARN("skipped: " << dir << " not present (install Debian's dataset-fashion-mnist)");
        return;
    }
    for (auto [split, n] : {std::pair{Split::Train, 60000}, std::pair{Split::Test, 10000}}) {
        auto ds = load_idx_dataset(dir, split);
        REQUIRE(ds->size() == n);
        REQUIRE(ds->sample_shape() == Shape{1, 28, 28});
        REQUIRE(ds->num_classes() == 10);
        std::vector<float> x(784);
        std::vector<int> counts(10, 0);
        float lo = 1, hi = 0;
        for (int64_t i = 0; i < n; ++i) {
            const float y = ds->read(i, x.data());
            REQUIRE(y >= 0);
            REQUIRE(y < 10);
            REQUIRE(y == std::floor(y));
            counts[int(y)]++;
            for (float v : x) {
                lo = std::min(lo, v);
                hi = std::max(hi, v);
            }
        }
        REQUIRE(lo >= 0.0f);
        REQUIRE(hi <= 1.0f);
        REQUIRE(hi == 1.0f);
        for (int c : counts) REQUIRE(c == n / 10);  // Fashion-MNIST is balanced
    }
}

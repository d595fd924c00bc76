// CIFAR-10 binary reader: the records are kept as bytes (a quarter of the memory of floats). Evaluation reads
// normalise them through transform_image's table; augmented training reads hand the record, as an 8-bit image, to
// transform_image itself, so CIFAR-10 and image folders share one augmentation (draws, padding value, flip).
#include "ringtrain/data/cifar10.hpp"

#include <filesystem>
#include <fstream>

#include "image_transform_detail.hpp"
#include "ringtrain/core/crc32c.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/rng.hpp"

namespace ringtrain::data {

namespace {

constexpr int kSide = 32;
constexpr int64_t kPlane = kSide * kSide;
constexpr int64_t kPixels = kCifar10RecordBytes - 1;
constexpr int64_t kClasses = 10;

ImageTransformOptions transform_options(const Cifar10Options& o) {
    ImageTransformOptions t;
    t.height = t.width = kSide;
    t.channels = 3;
    t.mean = o.mean;
    t.stddev = o.stddev;
    t.augment = o.augment;
    detail::check_transform_options(t);  // mean/std lengths, zero std, negative padding
    return t;
}

class Cifar10Dataset final : public Dataset {
public:
    // The stored records (CRC-32C), before any transform: the same on any host for the same files.
    uint64_t fingerprint() const override { return crc32c(std::as_bytes(std::span<const uint8_t>(records_))); }
    Cifar10Dataset(std::string source, std::vector<uint8_t> records, const Cifar10Options& options)
        : source_(std::move(source)), records_(std::move(records)), transform_(transform_options(options)),
          lut_(normalisation_table(transform_)) {
        n_ = static_cast<int64_t>(records_.size()) / kCifar10RecordBytes;
    }

    int64_t size() const override { return n_; }
    Shape sample_shape() const override { return {3, kSide, kSide}; }
    int64_t num_classes() const override { return kClasses; }

    // The planes are already CHW: one table look-up per byte, bitwise what transform_image gives without augmentation
    // (a 32x32 to 32x32 resample keeps every byte).
    float read(int64_t index, float* x) const override {
        const uint8_t* rec = record(index);
        for (int64_t c = 0; c < 3; ++c) {
            const auto& table = lut_[static_cast<size_t>(c)];
            const uint8_t* plane = rec + 1 + c * kPlane;
            for (int64_t i = 0; i < kPlane; ++i) x[c * kPlane + i] = table[plane[i]];
        }
        return static_cast<float>(rec[0]);
    }

    float read_training(int64_t index, float* x, uint64_t draw_key) const override {
        if (!transform_.augment.any()) return read(index, x);
        const uint8_t* rec = record(index);
        // The record as an interleaved 8-bit image (what transform_image takes), in a per-thread buffer.
        thread_local Image image{kSide, kSide, 3, std::vector<uint8_t>(static_cast<size_t>(kPixels))};
        for (int64_t i = 0; i < kPlane; ++i)
            for (int64_t c = 0; c < 3; ++c) image.pixels[static_cast<size_t>(i * 3 + c)] = rec[1 + c * kPlane + i];
        Rng rng(draw_key);
        transform_image(image, transform_, &rng, x);
        return static_cast<float>(rec[0]);
    }

    void will_read(int64_t index) const override {
        if (index < 0 || index >= n_) return;
        const char* p = reinterpret_cast<const char*>(records_.data() + index * kCifar10RecordBytes);
        for (int64_t off = 0; off < kCifar10RecordBytes; off += 64) __builtin_prefetch(p + off, 0, 0);
    }

    std::string description() const override {
        return "CIFAR-10 " + source_ + " (" + std::to_string(n_) + " samples of 3x32x32, 10 classes)";
    }

private:
    const uint8_t* record(int64_t index) const {
        if (index < 0 || index >= n_)
            throw Error("Cifar10Dataset::read: index " + std::to_string(index) + " out of range [0, " +
                        std::to_string(n_) + ")");
        return records_.data() + index * kCifar10RecordBytes;
    }

    std::string source_;
    std::vector<uint8_t> records_;  // label byte + 3072 pixel bytes per record
    int64_t n_ = 0;
    ImageTransformOptions transform_;  // 32x32, 3 channels, the mean/std and the training augmentation
    NormalisationTable lut_;           // transform_image's table for transform_
};

std::string expected_size_text(int64_t records_per_file) {
    if (records_per_file > 0)
        return std::to_string(records_per_file * kCifar10RecordBytes) + " bytes (" +
               std::to_string(records_per_file) + " records of " + std::to_string(kCifar10RecordBytes) + " bytes)";
    return "a non-zero multiple of " + std::to_string(kCifar10RecordBytes) + " bytes (records of 1 label + 3072 pixels)";
}

// Appends the file's records to `out` after checking its size and labels.
void append_file(const std::string& path, int64_t records_per_file, std::vector<uint8_t>& out) {
    const std::string hint = "; download the binary version from https://www.cs.toronto.edu/~kriz/cifar.html";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        throw InputError(path + ": CIFAR-10 file not found (data.dir must hold data_batch_1..5.bin and "
                         "test_batch.bin)" + hint);
    const auto size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
    if (ec) throw InputError(path + ": cannot read the file size: " + ec.message());
    const bool ok = records_per_file > 0 ? size == records_per_file * kCifar10RecordBytes
                                         : size > 0 && size % kCifar10RecordBytes == 0;
    if (!ok)
        throw InputError(path + ": " + std::to_string(size) + " bytes, expected " +
                         expected_size_text(records_per_file) + "; the file is truncated or not CIFAR-10's binary "
                         "version" + hint);
    std::ifstream in(path, std::ios::binary);
    const size_t start = out.size();
    out.resize(start + static_cast<size_t>(size));
    if (!in || !in.read(reinterpret_cast<char*>(out.data() + start), size))
        throw InputError(path + ": cannot read " + std::to_string(size) + " bytes");
    for (int64_t r = 0; r < size / kCifar10RecordBytes; ++r) {
        const uint8_t label = out[start + static_cast<size_t>(r * kCifar10RecordBytes)];
        if (label >= kClasses)
            throw InputError(path + ": record " + std::to_string(r) + " (byte offset " +
                             std::to_string(r * kCifar10RecordBytes) + ") has label " + std::to_string(label) +
                             ", expected 0..9; the file is not CIFAR-10's binary version (CIFAR-100 has 2 label "
                             "bytes per record)");
    }
}

}  // namespace

std::vector<std::string> cifar10_file_names(Split split) {
    if (split == Split::Test) return {"test_batch.bin"};
    return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"};
}

std::unique_ptr<Dataset> load_cifar10_files(const std::vector<std::string>& paths, int64_t records_per_file,
                                            const Cifar10Options& options) {
    check(!paths.empty(), "load_cifar10_files: no files");
    std::vector<uint8_t> records;
    for (const std::string& p : paths) append_file(p, records_per_file, records);
    std::string source = paths.front();
    if (paths.size() > 1) source += " and " + std::to_string(paths.size() - 1) + " more";
    return std::make_unique<Cifar10Dataset>(std::move(source), std::move(records), options);
}

std::unique_ptr<Dataset> load_cifar10_dataset(const std::string& dir, Split split, const Cifar10Options& options) {
    std::vector<std::string> paths;
    for (const std::string& name : cifar10_file_names(split)) paths.push_back((std::filesystem::path(dir) / name).string());
    return load_cifar10_files(paths, kCifar10RecordsPerFile, options);
}

}  // namespace ringtrain::data

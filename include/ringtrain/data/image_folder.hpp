// Image folders (torchvision's ImageFolder, Keras' image_dataset_from_directory): a root with one sub-folder per
// class, classes = the sorted sub-folder names, images = the .jpg .jpeg .png .ppm .pgm .bmp files (any case) below
// each class folder, sorted by path. Samples are {channels, H, W} floats made by transform_image from the decoded
// file, decoded on the loader's worker threads (or taken from an in-memory cache of the resized 8-bit images).
// Errors name the folder or file and are InputErrors (exit code 2).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ringtrain/data/dataset.hpp"
#include "ringtrain/data/image.hpp"
#include "ringtrain/data/image_transform.hpp"

namespace ringtrain::data {

// The files of one split, in label order then path order.
struct ImageFolderListing {
    std::string root;
    std::vector<std::string> classes;  // label i = classes[i]
    std::vector<std::string> files;    // paths
    std::vector<int32_t> labels;       // one per file
};

// Scans `root` (`key` names it in messages, e.g. "data.train_dir"). Hidden entries (".name") are skipped, so are
// files that are not images by extension and files directly in `root`; class folders are searched recursively.
// Throws InputError naming the folder when `root` is missing or not a folder, has no class sub-folder, or a class
// folder holds no image.
ImageFolderListing scan_image_folder(const std::string& root, const std::string& key);

// The test split: its classes must be among `train_classes` (a class only the test split has is an InputError naming
// both folders); labels are positions in `train_classes`, so a class the test split lacks is simply not tested.
ImageFolderListing scan_image_folder(const std::string& root, const std::string& key,
                                     const std::vector<std::string>& train_classes, const std::string& train_root);

struct ImageFolderOptions {
    ImageTransformOptions transform;  // size, channels, mean/std, augmentation (training reads only)
    bool cache = false;               // keep each decoded, resized image in memory after its first read
};

class ImageFolderDataset : public Dataset {
public:
    ImageFolderDataset(ImageFolderListing listing, ImageFolderOptions options);
    ~ImageFolderDataset() override;
    ImageFolderDataset(const ImageFolderDataset&) = delete;
    ImageFolderDataset& operator=(const ImageFolderDataset&) = delete;

    int64_t size() const override { return static_cast<int64_t>(listing_.files.size()); }
    Shape sample_shape() const override;
    int64_t num_classes() const override { return static_cast<int64_t>(listing_.classes.size()); }
    // Evaluation: resize and normalise, no augmentation.
    float read(int64_t index, float* x) const override;
    // Training: augmentation drawn from an Rng seeded with draw_key.
    float read_training(int64_t index, float* x, uint64_t draw_key) const override;
    bool reads_are_costly() const override { return true; }
    std::vector<std::string> class_names() const override { return listing_.classes; }
    // Every file's path below the root and its label, and the sizes of 64 files spread over the set (no decoding).
    uint64_t fingerprint() const override;
    std::string description() const override;

    const std::string& file(int64_t index) const { return listing_.files.at(static_cast<size_t>(index)); }
    int32_t label(int64_t index) const { return listing_.labels.at(static_cast<size_t>(index)); }
    // The size the cache keeps images at: the target size, or twice it with random_resized_crop (crops of a quarter
    // of the area keep full resolution). Without a random resized crop, cached samples are bitwise the uncached
    // ones; with one, uncached crops come from the full-resolution file (decode_transform_image) and cached ones from
    // the stored image, so they differ in detail (not in the draws).
    int stored_height() const { return stored_h_; }
    int stored_width() const { return stored_w_; }
    // The cache: bytes it holds now, and would hold with every image in it (0 when off).
    int64_t cache_bytes() const { return cached_bytes_.load(); }
    int64_t cache_bytes_when_full() const;

    // Whether the file at `index` has been decoded to its end in this process (by any read, or find_bad_files) and
    // has the same size and modification time as then. Training reads of such a JPEG decode only down to the
    // random resized crop's last row (DecodeExtent::RegionRows); every other read decodes the whole file, so a
    // damaged file fails on its first read, and again after it changed.
    bool decoded_completely(int64_t index) const;

    // Decodes files [begin, end) on `workers` threads (filling the cache when it is on) and returns the indices of
    // those that fail to decode, ascending; `reasons` gets each one's message. For data.skip_bad_files.
    std::vector<int64_t> find_bad_files(int64_t begin, int64_t end, int workers,
                                        std::vector<std::string>* reasons = nullptr) const;
    // Removes the files at `bad` (ascending, distinct indices). Not safe while a loader reads this data set.
    void drop_files(std::span<const int64_t> bad);

private:
    // The image of `index` at the stored size: the cache's copy, or decoded into `scratch` (and then cached when the
    // cache is on).
    const Image& stored_image(int64_t index, Image& scratch) const;
    // 0, or the stamp key (stamp_key) of the file as it was when it decoded completely.
    uint64_t decoded_key(size_t i) const { return decoded_whole_[i].load(std::memory_order_relaxed); }
    float transform(int64_t index, float* x, Rng* rng) const;
    void clear_cache();

    ImageFolderListing listing_;
    ImageFolderOptions opt_;
    int stored_h_ = 0, stored_w_ = 0;
    // One slot per file; a slot is written once (the first reader's image wins) and read without a lock.
    std::unique_ptr<std::atomic<const Image*>[]> cache_;
    mutable std::atomic<int64_t> cached_bytes_{0};
    // One slot per file: decoded_key. Written by any reader after a complete decode (the same key whoever wins).
    std::unique_ptr<std::atomic<uint64_t>[]> decoded_whole_;
};

}  // namespace ringtrain::data

// Reader for the CIFAR-10 binary version (https://www.cs.toronto.edu/~kriz/cifar.html, "CIFAR-10 binary
// version"): records of 1 label byte (0..9) and 3072 pixel bytes, 32x32 red then green then blue planes.
// Errors name the file and what is wrong with it, and are InputErrors (exit code 2). Samples are normalised per
// channel, and training reads augmented, by the image pipeline's transform (image_transform.hpp) on the 8-bit records.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/data/dataset.hpp"
#include "ringtrain/data/idx.hpp"  // Split
#include "ringtrain/data/image_transform.hpp"

namespace ringtrain::data {

inline constexpr int64_t kCifar10RecordBytes = 1 + 3 * 32 * 32;
inline constexpr int64_t kCifar10RecordsPerFile = 10000;  // every file of the standard distribution

// How samples are made from the records: transform_image at 32x32 with 3 channels.
struct Cifar10Options {
    std::vector<float> mean;    // per channel (red, green, blue) on the 0..1 scale; empty = 0
    std::vector<float> stddev;  // per channel; empty = 1
    // Training reads only (read_training, drawn from the loader's per-sample key): random_crop_padding (pad with the
    // normalised zero, crop 32x32 back), hflip, random_resized_crop (a box of the 32x32 image resized to 32x32).
    // read() (evaluation) never augments.
    ImageAugment augment;
};

// The standard file names: data_batch_1..5.bin for Train, test_batch.bin for Test.
std::vector<std::string> cifar10_file_names(Split split);

// Loads `paths` in order into one in-memory data set of {3, 32, 32} samples and 10 classes. Each file must be a
// non-zero multiple of the record size and, when records_per_file > 0, hold exactly that many records.
std::unique_ptr<Dataset> load_cifar10_files(const std::vector<std::string>& paths, int64_t records_per_file,
                                            const Cifar10Options& options = {});

// Loads the split's standard files from `dir`, each checked to hold exactly kCifar10RecordsPerFile records.
std::unique_ptr<Dataset> load_cifar10_dataset(const std::string& dir, Split split, const Cifar10Options& options = {});

}  // namespace ringtrain::data

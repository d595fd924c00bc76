// Reader for the IDX format of MNIST and Fashion-MNIST (gzip or plain), with magic and size checks.
// Errors name the file and what is wrong with it, and are InputErrors (exit code 2).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/data/dataset.hpp"

namespace ringtrain::data {

struct IdxArray {
    std::vector<int64_t> dims;     // e.g. {60000, 28, 28}
    std::vector<uint8_t> values;   // unsigned bytes (type code 0x08), row-major
};

// Reads one IDX file of unsigned bytes; `path` may end in .gz or be plain (magic bytes decide).
IdxArray read_idx_file(const std::string& path);

struct Normalization {
    bool scale_to_unit = true;  // divide bytes by 255
    float mean = 0.0f;          // then subtract mean and divide by std
    float stddev = 1.0f;
};

enum class Split { Train, Test };

// Loads "<dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]" into memory.
// Samples have shape {1, rows, cols}; num_classes is 1 + the largest label.
std::unique_ptr<Dataset> load_idx_dataset(const std::string& dir, Split split, const Normalization& norm = {});

}  // namespace ringtrain::data

// The pixel transforms of the image input path: resize, training augmentation and normalisation into the
// float CHW sample a model reads. Pure functions of (image, options, rng): the folder reader calls them from its
// worker threads with an Rng seeded per (run seed, epoch, sample), so batches are reproducible and resumable
// whatever the number of workers.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "ringtrain/core/rng.hpp"
#include "ringtrain/data/image.hpp"

namespace ringtrain::data {

// Resize to height x width: area averaging where a side shrinks (each output pixel is the mean of the source
// area it covers, fractional edges weighted), bilinear with half-pixel centres where it grows (as PIL and
// OpenCV INTER_LINEAR). Same channels.
Image resize_image(const Image& src, int height, int width);

struct ImageAugment {
    int random_crop_padding = 0;        // > 0: pad by P on every side (zeros), then crop back at a random offset
    bool hflip = false;                 // mirror left-right with probability 1/2
    float resized_crop_min_scale = 0;   // > 0: torchvision's RandomResizedCrop(scale=[min, max], ratio 3/4..4/3)
    float resized_crop_max_scale = 0;   //      from the decoded image, then resize to the target size
    bool any() const { return random_crop_padding > 0 || hflip || resized_crop_min_scale > 0; }
};

struct ImageTransformOptions {
    int height = 0;                 // the model's input size
    int width = 0;
    int channels = 3;               // 1 or 3
    std::vector<float> mean;        // per channel, on the 0..1 scale (empty = 0)
    std::vector<float> stddev;      // per channel (empty = 1)
    ImageAugment augment;           // applied only when transform_image gets an rng
};

// (v / 255 - mean[c]) / stddev[c] for every 8-bit value v of each channel c (up to 3): the float a pixel becomes,
// computed as one multiply-add v * (1 / (255 stddev)) + (-mean / stddev), within 5e-7 of the two divisions
// torchvision's ToTensor + Normalize do (more ulp than that near zero, where the rounded shift's error is absolute). Entry [c][0] is also what padding shows (the normalised zero). In-memory
// readers of 8-bit images (CIFAR-10) use it so that their unaugmented reads are bitwise transform_image's.
using NormalisationTable = std::array<std::array<float, 256>, 3>;
NormalisationTable normalisation_table(const ImageTransformOptions& options);

// A rectangle of an image: rows top..top+height, columns left..left+width.
struct CropBox {
    int top = 0;
    int left = 0;
    int height = 0;
    int width = 0;
};

// torchvision's RandomResizedCrop.get_params on an image of height x width: up to 10 tries of an area fraction
// uniform in [min_scale, max_scale] and an aspect ratio log-uniform in [3/4, 4/3] (draws: uniform() for the area,
// uniform() for the log-ratio, then below() for the top and the left of a box that fits); when no try fits, the
// centre crop of the largest box with a ratio clamped to [3/4, 4/3].
CropBox random_resized_crop_box(int height, int width, float min_scale, float max_scale, Rng& rng);

// Writes channels * height * width floats (CHW, (pixel/255 - mean[c]) / stddev[c]) to out. `image` must have
// options.channels channels. With rng == nullptr (evaluation): resize to the target size. With an rng
// (training): random_resized_crop (or plain resize), then pad-and-crop, then hflip, drawing in that order
// (random_resized_crop_box; the pad offsets top then left, each rng.below(2P + 1); the flip, rng.uniform() < 0.5).
// Resize, crop, pad, flip and normalisation run fused, row by row, into `out` (the resized pixels are rounded to
// 8 bits on the way, as torchvision's PIL path does); a worker thread allocates nothing per sample.
void transform_image(const Image& image, const ImageTransformOptions& options, Rng* rng, float* out);

// How much of a JPEG decode_transform_image entropy-decodes when it decodes only a random resized crop's region.
enum class DecodeExtent {
    // Every row to the end of the file, whatever the crop: a truncated or corrupt file fails on every read.
    WholeFile,
    // Stop after the region's last row (libjpeg's entropy decoding of the rows below it is skipped). Only for bytes
    // known to decode completely: ImageFolderDataset uses it for a file that this process has already decoded to
    // its end (the first epoch, or data.skip_bad_files' check) and that has not changed since (same size and
    // modification time), so a damaged file still fails on its first read.
    RegionRows,
};

// One sample from the bytes of an image file: what a worker of the image-folder reader runs. The same draws, in the
// same order, as decode_image + transform_image, and the same picture up to resampling, but faster:
// - without a random resized crop (evaluation, or plain resize), a JPEG decodes at the DCT scale that keeps it
//   >= the target size (decode_image's min_height/min_width), then transform_image;
// - with one, the crop box is drawn on the full-resolution size from the JPEG header, and only that box is decoded,
//   at the smallest DCT scale (1/2, 1/4, 1/8) that keeps it >= the target size: a small crop keeps full detail (as
//   torchvision's crop of the full picture), a large one decodes a fraction of the pixels. With
//   DecodeExtent::WholeFile the whole file is still entropy-decoded, so a truncated or corrupt JPEG is an error
//   whatever the crop; with RegionRows the decode stops after the crop's last row (the same pixels, bit for bit);
// - other formats: decode_image + transform_image (the extent does not matter: they are always decoded whole).
// `scratch` holds the decoded pixels between calls (no allocation per sample once it has grown).
void decode_transform_image(std::span<const uint8_t> bytes, std::string_view name, const ImageTransformOptions& options,
                            Rng* rng, Image& scratch, float* out, DecodeExtent extent = DecodeExtent::WholeFile);

}  // namespace ringtrain::data

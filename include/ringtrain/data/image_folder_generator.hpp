// Test data for the image path: image folders of synthetic pictures whose classes a small CNN separates (stripes
// in different directions, with random period, phase, colours and noise), written with our own encoders. Used by
// `ringtrain make-image-folder`, the tests and the benchmarks; nothing large is committed or downloaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/core/rng.hpp"
#include "ringtrain/data/image.hpp"

namespace ringtrain::data {

// The class names, in pattern order (which is also their sorted order, so label i draws pattern i).
// At most kPatternClasses.
inline constexpr int kPatternClasses = 6;
std::vector<std::string> pattern_class_names(int classes);

// One picture of pattern `pattern` (0 horizontal stripes, 1 vertical, 2 diagonal, 3 anti-diagonal, 4 checks,
// 5 rings), drawing period, phase, colours and noise from `rng`.
Image make_pattern_image(int pattern, int height, int width, int channels, Rng& rng);

enum class ImageFileFormat { Jpeg, Png, Mixed };  // Mixed: .jpg .png .ppm .bmp in turn

struct ImageFolderSpec {
    std::string out;  // the folder to write (class sub-folders are created in it): new or empty, else InputError
    int classes = 2;
    int per_class = 100;
    int height = 32, width = 32, channels = 3;
    ImageFileFormat format = ImageFileFormat::Jpeg;
    uint64_t seed = 1;
    int jpeg_quality = 90;
};

// Writes spec.per_class images into each of spec.classes sub-folders of spec.out; returns the paths written.
// Throws InputError for bad arguments or a folder it cannot write.
std::vector<std::string> write_pattern_image_folder(const ImageFolderSpec& spec);

// An image-quality folder from real photos: spec.per_class random square crops (a quarter to all of the shorter
// side, mirrored at random) of the `photos`, resized to spec.height x spec.width, written twice: as they are into
// "sharp" and, degraded by a box blur (radius 1-2) or a JPEG round trip at quality 5-15, into "degraded" (all
// stored as JPEG at spec.jpeg_quality, so the file type tells nothing). Returns the paths written.
std::vector<std::string> write_quality_image_folder(const std::vector<std::string>& photos, const ImageFolderSpec& spec);

}  // namespace ringtrain::data

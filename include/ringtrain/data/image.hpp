// Images as 8-bit pixels, and decoding/encoding them from files (JPEG with libjpeg-turbo, PNG with libpng,
// binary PPM/PGM and uncompressed BMP by hand). Errors name the file and are InputErrors (exit code 2).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ringtrain/core/error.hpp"

namespace ringtrain::data {

// Rows top to bottom, channels interleaved (HWC): 1 channel = grey, 3 = RGB.
struct Image {
    int height = 0;
    int width = 0;
    int channels = 0;
    std::vector<uint8_t> pixels;  // height * width * channels bytes
};

enum class ImageType { Jpeg, Png, Pnm, Bmp };

// The type by file extension, case-insensitive: .jpg .jpeg -> Jpeg, .png -> Png, .ppm .pgm -> Pnm, .bmp -> Bmp;
// nullopt for anything else (not an image file).
std::optional<ImageType> image_type_of(std::string_view path);

// A corrupt, truncated, zero-byte or unsupported image; what() names the file and what is wrong.
class ImageDecodeError : public InputError {
public:
    using InputError::InputError;
};

// Decodes `bytes` (the content of the file `name`, used in errors) to `channels` (1 or 3): grey is replicated to
// RGB; RGB becomes grey with the ITU-R 601 luma weights (PIL's convert("L")); alpha is dropped; 16-bit PNG is
// reduced to 8 bits. For JPEG with min_height and min_width > 0, libjpeg-turbo's DCT scaling decodes at the
// smallest scale 1/2, 1/4 or 1/8 (those with SIMD IDCTs) that keeps both sides >= the minimum, so a 4000-pixel
// photo for a 224x224 model decodes a fraction of its pixels. The decoded type is sniffed from the bytes (a .jpg that is a PNG still decodes).
Image decode_image(std::span<const uint8_t> bytes, std::string_view name, int channels, int min_height = 0,
                   int min_width = 0);
// Reads the file and decodes it as above.
Image decode_image_file(const std::string& path, int channels, int min_height = 0, int min_width = 0);
// As decode_image, into `out`, whose pixel buffer is reused: a worker that decodes image after image into one Image
// allocates only when a picture is larger than any before.
void decode_image_into(std::span<const uint8_t> bytes, std::string_view name, int channels, int min_height,
                       int min_width, Image& out);
// A file's size and modification time (from the fstat read_image_file does anyway): how ImageFolderDataset knows
// that a file is still the one it once decoded completely.
struct FileStamp {
    int64_t size = -1;
    int64_t mtime_ns = 0;
    friend bool operator==(const FileStamp&, const FileStamp&) = default;
};

// Reads the whole file into `bytes` (reusing its capacity), and its stamp into *stamp when given; ImageDecodeError
// naming the file when it cannot be read.
void read_image_file(const std::string& path, std::vector<uint8_t>& bytes, FileStamp* stamp = nullptr);
// The stamp of the file at `path` without reading it; size -1 when it cannot be stat'ed.
FileStamp file_stamp(const std::string& path);

// Encoders, for test data, the demo-folder script and benchmarks.
// Chroma subsampling of an RGB JPEG (grey has none): 4:2:0 (half width and height, the usual), 4:2:2, 4:4:4.
enum class JpegSubsampling { S420, S422, S444 };
std::vector<uint8_t> encode_jpeg(const Image& image, int quality = 90, JpegSubsampling subsampling = JpegSubsampling::S420);
std::vector<uint8_t> encode_png(const Image& image);
std::vector<uint8_t> encode_pnm(const Image& image);  // P5 (grey) or P6 (RGB)
std::vector<uint8_t> encode_bmp(const Image& image);  // 24-bit uncompressed (grey written as RGB)

}  // namespace ringtrain::data

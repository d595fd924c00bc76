// Internal to the image decoders: one decoder per format, and the helpers they share. decode_image (image_decode.cpp)
// sniffs the format and dispatches here; each decoder throws ImageDecodeError naming `name`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "ringtrain/data/image.hpp"
#include "ringtrain/data/image_transform.hpp"

namespace ringtrain::data::detail {

// Decoders write into `out` (its pixel buffer is reused: a worker decoding image after image allocates only when an
// image is larger than any before). channels is 1 or 3.
void decode_jpeg(std::span<const uint8_t> bytes, std::string_view name, int channels, int min_height,
                 int min_width, Image& out);
void decode_png(std::span<const uint8_t> bytes, std::string_view name, int channels, Image& out);
void decode_pnm(std::span<const uint8_t> bytes, std::string_view name, int channels, Image& out);
void decode_bmp(std::span<const uint8_t> bytes, std::string_view name, int channels, Image& out);

// "<name>: <what>" as an ImageDecodeError.
[[noreturn]] void fail(std::string_view name, const std::string& what);

// Refuses sizes that are zero, negative or too large to be a real picture (a corrupt header claiming 60000 x 60000
// would otherwise allocate gigabytes before the data runs out).
void check_size(std::string_view name, int64_t height, int64_t width);

// Sets out's shape and sizes its buffer (keeping capacity).
void reshape(Image& out, int height, int width, int channels);

// ITU-R 601 luma of 8-bit RGB, rounded, with PIL's integer weights (convert("L")).
inline uint8_t luma601(uint8_t r, uint8_t g, uint8_t b) {
    return static_cast<uint8_t>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

}  // namespace ringtrain::data::detail

namespace ringtrain::data::detail {

// The sniffed format of `bytes`, or nullopt.
std::optional<ImageType> sniff_image_type(std::span<const uint8_t> bytes);

// A JPEG's header, as decode_jpeg_region reads it.
struct JpegHeader {
    int height = 0;
    int width = 0;
};

// What decode_jpeg_region decodes: rows [top, bottom) and at least the columns [left, right) of the picture at DCT
// scale 1/denom (denom 1, 2, 4 or 8; coordinates in that scaled picture, whose size is ceil(size / denom)).
struct JpegRegion {
    int denom = 1;
    int top = 0, bottom = 0, left = 0, right = 0;
};

// Picks the region once the header is known (the crop box is drawn on the full-resolution size).
class JpegRegionChooser {
public:
    virtual JpegRegion choose(const JpegHeader& header) = 0;

protected:
    ~JpegRegionChooser() = default;
};

// Reads the header, asks `chooser` for the region and decodes it into `out` (libjpeg API, one decompressor per
// thread, reused). The decoder widens the columns to whole iMCUs, so out starts at column *first_column. With
// DecodeExtent::WholeFile every MCU is still entropy-decoded to the end of the file, so a truncated or corrupt file
// is an error whatever the region; with RegionRows the decode stops after the region's last row (for a file known
// to decode completely). Returns false, without calling chooser, for a CMYK/YCCK JPEG (libjpeg cannot convert it;
// use decode_image).
bool decode_jpeg_region(std::span<const uint8_t> bytes, std::string_view name, int channels,
                        JpegRegionChooser& chooser, Image& out, int* first_column, DecodeExtent extent);

}  // namespace ringtrain::data::detail

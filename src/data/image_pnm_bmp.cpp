// The two formats simple enough to read by hand: binary PGM/PPM (P5/P6, maxval up to 65535) and uncompressed BMP
// (24/32-bit, and 8-bit with a palette). Every length is checked against the file before a pixel is read.
#include <algorithm>
#include <cctype>
#include <cstring>

#include "image_codecs.hpp"

namespace ringtrain::data {

namespace {

// Writes one decoded pixel (r, g, b) as `channels` bytes.
inline void put_rgb(uint8_t* dst, int channels, uint8_t r, uint8_t g, uint8_t b) {
    if (channels == 3) {
        dst[0] = r;
        dst[1] = g;
        dst[2] = b;
    } else {
        dst[0] = detail::luma601(r, g, b);
    }
}

// ---- PNM ----

class PnmHeader {
public:
    PnmHeader(std::span<const uint8_t> bytes, std::string_view name) : bytes_(bytes), name_(name) {}

    // The next decimal number, skipping whitespace and '#' comments.
    int64_t number(const char* what) {
        for (;;) {
            while (pos_ < bytes_.size() && std::isspace(bytes_[pos_])) ++pos_;
            if (pos_ < bytes_.size() && bytes_[pos_] == '#') {
                while (pos_ < bytes_.size() && bytes_[pos_] != '\n' && bytes_[pos_] != '\r') ++pos_;
                continue;
            }
            break;
        }
        if (pos_ >= bytes_.size()) detail::fail(name_, std::string("file ends before the PNM header's ") + what + " (truncated)");
        if (!std::isdigit(bytes_[pos_]))
            detail::fail(name_, std::string("corrupt PNM header: expected the ") + what + " as a decimal number");
        int64_t value = 0;
        while (pos_ < bytes_.size() && std::isdigit(bytes_[pos_])) {
            value = value * 10 + (bytes_[pos_++] - '0');
            if (value > (int64_t{1} << 31)) detail::fail(name_, std::string("corrupt PNM header: the ") + what + " is too large");
        }
        return value;
    }
    // After maxval: exactly one whitespace byte, then the raster.
    size_t raster_start() {
        if (pos_ >= bytes_.size() || !std::isspace(bytes_[pos_]))
            detail::fail(name_, "corrupt PNM header: no whitespace after maxval (truncated?)");
        return pos_ + 1;
    }
    void skip(size_t n) { pos_ += n; }

private:
    std::span<const uint8_t> bytes_;
    std::string_view name_;
    size_t pos_ = 0;
};

}  // namespace

namespace detail {

void decode_pnm(std::span<const uint8_t> bytes, std::string_view name, int channels, Image& out) {
    const int file_channels = bytes[1] == '6' ? 3 : 1;
    PnmHeader header(bytes, name);
    header.skip(2);
    const int64_t width = header.number("width");
    const int64_t height = header.number("height");
    const int64_t maxval = header.number("maxval");
    check_size(name, height, width);
    if (maxval < 1 || maxval > 65535) fail(name, "corrupt PNM header: maxval " + std::to_string(maxval) + " is not 1..65535");
    const size_t start = header.raster_start();
    const int sample_bytes = maxval > 255 ? 2 : 1;
    const size_t samples = static_cast<size_t>(height) * width * file_channels;
    if (bytes.size() - start < samples * sample_bytes)
        fail(name, "file ends inside the pixels (truncated PNM: " + std::to_string(bytes.size() - start) + " of " +
                       std::to_string(samples * sample_bytes) + " bytes)");
    reshape(out, static_cast<int>(height), static_cast<int>(width), channels);
    const uint8_t* src = bytes.data() + start;

    // Samples scale to 0..255 with rounding; maxval 255 (nearly every file) is a straight copy.
    uint8_t lut[256];
    for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(maxval > 255 || v > maxval ? 255 : (v * 255 + maxval / 2) / maxval);
    auto sample = [&](size_t i) -> uint8_t {
        if (sample_bytes == 2) {
            const int64_t v = std::min<int64_t>((src[2 * i] << 8) | src[2 * i + 1], maxval);
            return static_cast<uint8_t>((v * 255 + maxval / 2) / maxval);
        }
        return lut[src[i]];
    };
    const size_t pixels = static_cast<size_t>(height) * width;
    uint8_t* dst = out.pixels.data();
    if (file_channels == channels && maxval == 255) {
        std::memcpy(dst, src, pixels * channels);
    } else if (file_channels == 1) {
        for (size_t i = 0; i < pixels; ++i) {
            const uint8_t v = sample(i);
            for (int c = 0; c < channels; ++c) dst[i * channels + c] = v;
        }
    } else {
        for (size_t i = 0; i < pixels; ++i) put_rgb(dst + i * channels, channels, sample(3 * i), sample(3 * i + 1), sample(3 * i + 2));
    }
}

}  // namespace detail

std::vector<uint8_t> encode_pnm(const Image& image) {
    check(image.channels == 1 || image.channels == 3, "encode_pnm: 1 or 3 channels");
    check(image.pixels.size() == static_cast<size_t>(image.height) * image.width * image.channels,
          "encode_pnm: pixel buffer does not match the image size");
    const std::string header = std::string(image.channels == 3 ? "P6" : "P5") + "\n" + std::to_string(image.width) +
                               " " + std::to_string(image.height) + "\n255\n";
    std::vector<uint8_t> bytes(header.begin(), header.end());
    bytes.insert(bytes.end(), image.pixels.begin(), image.pixels.end());
    return bytes;
}

// ---- BMP ----

namespace {

uint32_t u32le(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }
uint16_t u16le(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
void put32(std::vector<uint8_t>& b, uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put16(std::vector<uint8_t>& b, uint16_t v) {
    b.push_back(static_cast<uint8_t>(v));
    b.push_back(static_cast<uint8_t>(v >> 8));
}

// The shift of an 8-bit-wide channel mask (0xFF << shift), or -1 when the mask is anything else.
int byte_mask_shift(uint32_t mask) {
    for (int shift = 0; shift <= 24; shift += 8)
        if (mask == (0xFFu << shift)) return shift;
    return -1;
}

}  // namespace

namespace detail {

void decode_bmp(std::span<const uint8_t> bytes, std::string_view name, int channels, Image& out) {
    if (bytes.size() < 14 + 40) fail(name, "file ends inside the BMP header (truncated BMP)");
    const uint8_t* b = bytes.data();
    const uint32_t data_offset = u32le(b + 10);
    const uint32_t dib_size = u32le(b + 14);
    if (dib_size == 12) fail(name, "an OS/2 (BITMAPCOREHEADER) BMP, which is not supported: resave it as a Windows BMP or PNG");
    if (dib_size < 40 || dib_size > 1024) fail(name, "corrupt BMP header (info header size " + std::to_string(dib_size) + ")");
    const int64_t width = static_cast<int32_t>(u32le(b + 18));
    const int64_t signed_height = static_cast<int32_t>(u32le(b + 22));
    const int bpp = u16le(b + 28);
    const uint32_t compression = u32le(b + 30);
    uint32_t colors_used = u32le(b + 46);
    const bool top_down = signed_height < 0;
    const int64_t height = top_down ? -signed_height : signed_height;
    check_size(name, height, width);

    // Channel shifts within a 32-bit pixel (BI_RGB: BGRX; BI_BITFIELDS: the masks after the 40-byte header).
    int shift_r = 16, shift_g = 8, shift_b = 0;
    if (compression == 3 && bpp == 32) {
        if (bytes.size() < 14 + 40 + 12) fail(name, "file ends inside the BMP colour masks (truncated BMP)");
        shift_r = byte_mask_shift(u32le(b + 54));
        shift_g = byte_mask_shift(u32le(b + 58));
        shift_b = byte_mask_shift(u32le(b + 62));
        if (shift_r < 0 || shift_g < 0 || shift_b < 0)
            fail(name, "a BMP with colour masks other than 8 bits a channel, which is not supported: resave it as PNG");
    } else if (compression != 0) {
        fail(name, "a compressed BMP (compression " + std::to_string(compression) +
                       "), which is not supported: only uncompressed 8-bit palette, 24-bit and 32-bit BMP are read");
    }
    if (bpp != 8 && bpp != 24 && bpp != 32)
        fail(name, "a " + std::to_string(bpp) + "-bit BMP, which is not supported: only 8-bit palette, 24-bit and 32-bit");

    const uint8_t* palette = nullptr;
    if (bpp == 8) {
        if (colors_used == 0) colors_used = 256;
        if (colors_used > 256) fail(name, "corrupt BMP header (" + std::to_string(colors_used) + " palette colours)");
        const uint64_t palette_start = 14 + uint64_t{dib_size};
        if (palette_start + 4ull * colors_used > bytes.size())
            fail(name, "file ends inside the BMP palette (truncated BMP)");
        palette = b + palette_start;
    }
    const uint64_t stride = ((static_cast<uint64_t>(width) * bpp + 31) / 32) * 4;
    const uint64_t row_bytes = static_cast<uint64_t>(width) * bpp / 8;
    if (data_offset < 14 + 40 || data_offset > bytes.size() ||
        bytes.size() - data_offset < stride * (height - 1) + row_bytes)
        fail(name, "file ends inside the pixels (truncated BMP)");

    reshape(out, static_cast<int>(height), static_cast<int>(width), channels);
    for (int64_t y = 0; y < height; ++y) {
        const uint8_t* row = b + data_offset + stride * (top_down ? y : height - 1 - y);
        uint8_t* dst = out.pixels.data() + static_cast<size_t>(y) * width * channels;
        for (int64_t x = 0; x < width; ++x, dst += channels) {
            if (bpp == 24) {
                const uint8_t* p = row + 3 * x;
                put_rgb(dst, channels, p[2], p[1], p[0]);
            } else if (bpp == 32) {
                const uint32_t v = u32le(row + 4 * x);
                put_rgb(dst, channels, static_cast<uint8_t>(v >> shift_r), static_cast<uint8_t>(v >> shift_g),
                        static_cast<uint8_t>(v >> shift_b));
            } else {
                const uint32_t index = row[x];
                if (index >= colors_used)
                    fail(name, "corrupt BMP: pixel index " + std::to_string(index) + " is outside the " +
                                   std::to_string(colors_used) + "-colour palette");
                const uint8_t* p = palette + 4 * index;
                put_rgb(dst, channels, p[2], p[1], p[0]);
            }
        }
    }
}

}  // namespace detail

std::vector<uint8_t> encode_bmp(const Image& image) {
    check(image.channels == 1 || image.channels == 3, "encode_bmp: 1 or 3 channels");
    check(image.pixels.size() == static_cast<size_t>(image.height) * image.width * image.channels,
          "encode_bmp: pixel buffer does not match the image size");
    const uint32_t stride = ((static_cast<uint32_t>(image.width) * 24 + 31) / 32) * 4;
    const uint32_t data_size = stride * static_cast<uint32_t>(image.height);
    std::vector<uint8_t> b;
    b.reserve(54 + data_size);
    b.push_back('B');
    b.push_back('M');
    put32(b, 54 + data_size);
    put32(b, 0);
    put32(b, 54);
    put32(b, 40);  // BITMAPINFOHEADER
    put32(b, static_cast<uint32_t>(image.width));
    put32(b, static_cast<uint32_t>(image.height));  // positive: bottom-up rows
    put16(b, 1);
    put16(b, 24);
    put32(b, 0);  // BI_RGB
    put32(b, data_size);
    put32(b, 2835);  // 72 dpi
    put32(b, 2835);
    put32(b, 0);
    put32(b, 0);
    for (int y = image.height - 1; y >= 0; --y) {
        const uint8_t* src = image.pixels.data() + static_cast<size_t>(y) * image.width * image.channels;
        for (int x = 0; x < image.width; ++x) {
            const uint8_t* p = src + static_cast<size_t>(x) * image.channels;
            const uint8_t r = p[0], g = image.channels == 3 ? p[1] : p[0], bl = image.channels == 3 ? p[2] : p[0];
            b.push_back(bl);
            b.push_back(g);
            b.push_back(r);
        }
        for (uint32_t pad = static_cast<uint32_t>(image.width) * 3; pad < stride; ++pad) b.push_back(0);
    }
    return b;
}

}  // namespace ringtrain::data

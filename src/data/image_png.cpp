// PNG through libpng: 1/2/4/8/16-bit grey, grey+alpha, palette, RGB and RGBA, interlaced or not, reduced to 8-bit grey
// or RGB (16 -> 8 bits keeps the high byte, alpha is dropped, as PIL's convert does).
//
// libpng reports errors by longjmp. The frames that call setjmp (read_header, read_rows) hold only trivially
// destructible locals, so jumping out of libpng skips no destructor; the C++ owners live in the caller.
#include <png.h>

#include <csetjmp>
#include <cstring>

#include "image_codecs.hpp"

namespace ringtrain::data {

namespace {

struct PngReader {
    std::span<const uint8_t> bytes;
    size_t offset = 0;
    char error[256] = {};
};

void on_error(png_structp png, png_const_charp message) {
    auto* reader = static_cast<PngReader*>(png_get_error_ptr(png));
    std::snprintf(reader->error, sizeof reader->error, "%s", message);
    png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // benign (e.g. a known-incorrect sRGB profile): the pixels are fine

void on_read(png_structp png, png_bytep data, png_size_t length) {
    auto* reader = static_cast<PngReader*>(png_get_io_ptr(png));
    if (reader->bytes.size() - reader->offset < length) png_error(png, "file ends early (truncated PNG)");
    std::memcpy(data, reader->bytes.data() + reader->offset, length);
    reader->offset += length;
}

struct ReadInfo {
    png_uint_32 width = 0, height = 0;
    int channels = 0;  // after the transforms: 1 (grey) or 3 (RGB)
};

// Reads the header and sets the transforms to 8-bit grey or RGB. Returns false on a libpng error.
bool read_header(png_structp png, png_infop info, ReadInfo* out) {
    if (setjmp(png_jmpbuf(png))) return false;
    png_read_info(png, info);
    int bit_depth = 0, color_type = 0, interlace = 0;
    png_get_IHDR(png, info, &out->width, &out->height, &bit_depth, &color_type, &interlace, nullptr, nullptr);
    if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (bit_depth == 16) png_set_strip_16(png);
    // Transparency (an alpha channel, or a tRNS chunk expanded to one) is dropped.
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
    png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    out->channels = png_get_channels(png, info);
    return true;
}

bool read_rows(png_structp png, png_infop info, png_bytepp rows) {
    if (setjmp(png_jmpbuf(png))) return false;
    png_read_image(png, rows);
    png_read_end(png, nullptr);  // checks the chunks after the pixels: a cut-off file is an error, not a picture
    (void)info;
    return true;
}

struct PngReadGuard {
    png_structp png = nullptr;
    png_infop info = nullptr;
    ~PngReadGuard() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

}  // namespace

namespace detail {

void decode_png(std::span<const uint8_t> bytes, std::string_view name, int channels, Image& out) {
    PngReader reader{bytes};
    PngReadGuard guard;
    guard.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, on_error, on_warning);
    if (!guard.png) throw Error("libpng: cannot create a reader");
    guard.info = png_create_info_struct(guard.png);
    if (!guard.info) throw Error("libpng: cannot create an info struct");
    png_set_read_fn(guard.png, &reader, on_read);
    // Refuse absurd sizes before libpng allocates anything for them (check_size below says why).
    png_set_user_limits(guard.png, 1u << 28, 1u << 28);

    ReadInfo header;
    if (!read_header(guard.png, guard.info, &header))
        fail(name, std::string("corrupt or truncated PNG header (libpng: ") + reader.error + ")");
    check_size(name, header.height, header.width);
    if (header.channels != 1 && header.channels != 3)
        fail(name, "PNG decodes to " + std::to_string(header.channels) + " channels: unsupported");
    const int h = static_cast<int>(header.height), w = static_cast<int>(header.width);

    // Decode straight into `out` when the channel counts agree, else into a temporary and convert.
    Image converted;
    Image& target = header.channels == channels ? out : converted;
    reshape(target, h, w, header.channels);
    std::vector<png_bytep> rows(h);
    for (int y = 0; y < h; ++y) rows[y] = target.pixels.data() + static_cast<size_t>(y) * w * header.channels;
    if (!read_rows(guard.png, guard.info, rows.data()))
        fail(name, std::string("corrupt or truncated PNG (libpng: ") + reader.error + ")");
    if (header.channels == channels) return;

    reshape(out, h, w, channels);
    const uint8_t* src = converted.pixels.data();
    uint8_t* dst = out.pixels.data();
    const size_t n = static_cast<size_t>(h) * w;
    if (channels == 3) {
        for (size_t i = 0; i < n; ++i) dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = src[i];
    } else {
        for (size_t i = 0; i < n; ++i) dst[i] = luma601(src[3 * i], src[3 * i + 1], src[3 * i + 2]);
    }
}

}  // namespace detail

namespace {

struct PngWriter {
    std::vector<uint8_t>* bytes;
    char error[256] = {};
};

void on_write(png_structp png, png_bytep data, png_size_t length) {
    auto* writer = static_cast<PngWriter*>(png_get_io_ptr(png));
    writer->bytes->insert(writer->bytes->end(), data, data + length);
}

void on_write_error(png_structp png, png_const_charp message) {
    auto* writer = static_cast<PngWriter*>(png_get_error_ptr(png));
    std::snprintf(writer->error, sizeof writer->error, "%s", message);
    png_longjmp(png, 1);
}

bool write_png(png_structp png, png_infop info, const Image* image, png_bytepp rows) {
    if (setjmp(png_jmpbuf(png))) return false;
    png_set_IHDR(png, info, static_cast<png_uint_32>(image->width), static_cast<png_uint_32>(image->height), 8,
                 image->channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(png, 6);
    png_write_info(png, info);
    png_write_image(png, rows);
    png_write_end(png, nullptr);
    return true;
}

struct PngWriteGuard {
    png_structp png = nullptr;
    png_infop info = nullptr;
    ~PngWriteGuard() { png_destroy_write_struct(&png, info ? &info : nullptr); }
};

}  // namespace

std::vector<uint8_t> encode_png(const Image& image) {
    check(image.channels == 1 || image.channels == 3, "encode_png: 1 or 3 channels");
    check(image.height > 0 && image.width > 0 &&
              image.pixels.size() == static_cast<size_t>(image.height) * image.width * image.channels,
          "encode_png: pixel buffer does not match the image size");
    std::vector<uint8_t> bytes;
    PngWriter writer{&bytes};
    PngWriteGuard guard;
    guard.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &writer, on_write_error, on_warning);
    if (!guard.png) throw Error("libpng: cannot create a writer");
    guard.info = png_create_info_struct(guard.png);
    if (!guard.info) throw Error("libpng: cannot create an info struct");
    png_set_write_fn(guard.png, &writer, on_write, nullptr);
    std::vector<png_bytep> rows(image.height);
    for (int y = 0; y < image.height; ++y)
        rows[y] = const_cast<png_bytep>(image.pixels.data() + static_cast<size_t>(y) * image.width * image.channels);
    if (!write_png(guard.png, guard.info, &image, rows.data())) throw Error(std::string("encode_png: ") + writer.error);
    return bytes;
}

}  // namespace ringtrain::data

// decode_image: sniffs the format from the first bytes and dispatches to the decoder of that format; the shared
// helpers of the decoders (errors, size checks).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <sys/stat.h>

#include "image_codecs.hpp"
#include "ringtrain/data/image.hpp"

namespace ringtrain::data {

namespace detail {

void fail(std::string_view name, const std::string& what) {
    throw ImageDecodeError(std::string(name) + ": " + what);
}

void check_size(std::string_view name, int64_t height, int64_t width) {
    // 2^28 pixels (16384 x 16384): far above any photo a trainer reads, far below what would exhaust memory.
    constexpr int64_t kMaxPixels = int64_t{1} << 28;
    if (height <= 0 || width <= 0)
        fail(name, "the header gives an empty or negative size (" + std::to_string(width) + "x" +
                       std::to_string(height) + "): corrupt image");
    if (height > kMaxPixels || width > kMaxPixels || height * width > kMaxPixels)
        fail(name, "the header gives " + std::to_string(width) + "x" + std::to_string(height) +
                       " pixels, more than the 2^28 this reader accepts: corrupt, or resize the image first");
}

void reshape(Image& out, int height, int width, int channels) {
    out.height = height;
    out.width = width;
    out.channels = channels;
    out.pixels.resize(static_cast<size_t>(height) * width * channels);
}

}  // namespace detail

namespace {

std::string lower(std::string_view s) {
    std::string r(s);
    std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return r;
}

bool starts_with(std::span<const uint8_t> bytes, std::initializer_list<uint8_t> magic) {
    return bytes.size() >= magic.size() && std::equal(magic.begin(), magic.end(), bytes.begin());
}

}  // namespace

std::optional<ImageType> detail::sniff_image_type(std::span<const uint8_t> bytes) {
    if (starts_with(bytes, {0xFF, 0xD8, 0xFF})) return ImageType::Jpeg;
    if (starts_with(bytes, {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'})) return ImageType::Png;
    if (starts_with(bytes, {'P', '5'}) || starts_with(bytes, {'P', '6'})) return ImageType::Pnm;
    if (starts_with(bytes, {'B', 'M'})) return ImageType::Bmp;
    return std::nullopt;
}

namespace {

// What the first bytes look like when they are no format we read, for the error message.
std::string describe_unknown(std::span<const uint8_t> bytes) {
    if (starts_with(bytes, {'G', 'I', 'F', '8'})) return "a GIF image, which is not supported (convert it to PNG)";
    if (starts_with(bytes, {'R', 'I', 'F', 'F'})) return "a RIFF file (WebP?), which is not supported (convert it to JPEG or PNG)";
    if (starts_with(bytes, {'I', 'I', '*', 0}) || starts_with(bytes, {'M', 'M', 0, '*'}))
        return "a TIFF image, which is not supported (convert it to PNG)";
    if (starts_with(bytes, {'P', '1'}) || starts_with(bytes, {'P', '2'}) || starts_with(bytes, {'P', '3'}) ||
        starts_with(bytes, {'P', '4'}))
        return "an ASCII or 1-bit PNM, which is not supported (only binary P5/P6)";
    return "not a JPEG, PNG, binary PPM/PGM or BMP image (unknown first bytes): corrupt or not an image";
}

}  // namespace

std::optional<ImageType> image_type_of(std::string_view path) {
    const auto dot = path.rfind('.');
    const auto slash = path.find_last_of("/\\");
    if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) return std::nullopt;
    const std::string ext = lower(path.substr(dot + 1));
    if (ext == "jpg" || ext == "jpeg") return ImageType::Jpeg;
    if (ext == "png") return ImageType::Png;
    if (ext == "ppm" || ext == "pgm") return ImageType::Pnm;
    if (ext == "bmp") return ImageType::Bmp;
    return std::nullopt;
}

void decode_image_into(std::span<const uint8_t> bytes, std::string_view name, int channels, int min_height,
                       int min_width, Image& out) {
    if (channels != 1 && channels != 3)
        throw InputError(std::string(name) + ": images decode to 1 (grey) or 3 (RGB) channels, not " +
                         std::to_string(channels));
    if (bytes.empty()) detail::fail(name, "empty file (0 bytes): not an image");
    const auto type = detail::sniff_image_type(bytes);
    if (!type) detail::fail(name, describe_unknown(bytes));
    switch (*type) {
        case ImageType::Jpeg: detail::decode_jpeg(bytes, name, channels, min_height, min_width, out); break;
        case ImageType::Png: detail::decode_png(bytes, name, channels, out); break;
        case ImageType::Pnm: detail::decode_pnm(bytes, name, channels, out); break;
        case ImageType::Bmp: detail::decode_bmp(bytes, name, channels, out); break;
    }
}

Image decode_image(std::span<const uint8_t> bytes, std::string_view name, int channels, int min_height,
                   int min_width) {
    Image out;
    decode_image_into(bytes, name, channels, min_height, min_width, out);
    return out;
}

namespace {

FileStamp stamp_of(const struct stat& st) {
    return {static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

}  // namespace

FileStamp file_stamp(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return {};
    return stamp_of(st);
}

void read_image_file(const std::string& path, std::vector<uint8_t>& bytes, FileStamp* stamp) {
    struct Closer {
        void operator()(std::FILE* f) const { std::fclose(f); }
    };
    std::unique_ptr<std::FILE, Closer> file(std::fopen(path.c_str(), "rb"));
    if (!file) detail::fail(path, std::string("cannot open: ") + std::strerror(errno));
    // Size the buffer to the file (resize only zero-fills growth, so a reused buffer costs no memset), then keep
    // reading to the end in case the file is longer than it said (or is not a regular file).
    size_t used = 0;
    struct stat st {};
    if (::fstat(::fileno(file.get()), &st) != 0) detail::fail(path, std::string("cannot stat: ") + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) detail::fail(path, "is a directory, not an image file");
    if (stamp) *stamp = stamp_of(st);
    bytes.resize(S_ISREG(st.st_mode) ? static_cast<size_t>(st.st_size) : 0);
    for (;;) {
        if (used == bytes.size()) {
            // Probe before growing: at the end of the file this reads nothing and nothing is zero-filled.
            uint8_t probe = 0;
            if (std::fread(&probe, 1, 1, file.get()) == 0) {
                if (std::ferror(file.get())) detail::fail(path, std::string("read error: ") + std::strerror(errno));
                break;
            }
            bytes.resize(std::max<size_t>(4096, 2 * bytes.size()));
            bytes[used++] = probe;
        }
        const size_t got = std::fread(bytes.data() + used, 1, bytes.size() - used, file.get());
        used += got;
        if (got == 0) {
            if (std::ferror(file.get())) detail::fail(path, std::string("read error: ") + std::strerror(errno));
            break;
        }
    }
    bytes.resize(used);
}

Image decode_image_file(const std::string& path, int channels, int min_height, int min_width) {
    std::vector<uint8_t> bytes;
    read_image_file(path, bytes);
    return decode_image(bytes, path, channels, min_height, min_width);
}

}  // namespace ringtrain::data

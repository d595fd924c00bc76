// Image decoding and encoding: round trips through every encoder/decoder (grey and RGB), channel conversion, type
// sniffing, JPEG DCT scaling, and every bad-file case with the file named in the error.
#include <catch2/catch.hpp>

#include <png.h>

#include <atomic>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "ringtrain/core/rng.hpp"
#include "ringtrain/data/image.hpp"

using namespace ringtrain;
using namespace ringtrain::data;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        static std::atomic<int> counter{0};
        path = fs::temp_directory_path() /
               ("ringtrain_test_image_decode_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string write(const std::string& name, const std::vector<uint8_t>& bytes) const {
        const std::string p = (path / name).string();
        std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                 static_cast<std::streamsize>(bytes.size()));
        return p;
    }
};

// A smooth picture (gradients and a soft disc) that JPEG keeps within a few levels; channel c differs per channel.
Image smooth_image(int h, int w, int channels) {
    Image im{h, w, channels, std::vector<uint8_t>(static_cast<size_t>(h) * w * channels)};
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
            for (int c = 0; c < channels; ++c) {
                const double dx = x - w / 2.0, dy = y - h / 2.0;
                const double disc = 60.0 * std::exp(-(dx * dx + dy * dy) / (0.1 * w * h));
                const double v = 40 + 120.0 * (c == 1 ? y : x) / std::max(1, (c == 1 ? h : w)) + disc + 10 * c;
                im.pixels[(static_cast<size_t>(y) * w + x) * channels + c] = static_cast<uint8_t>(std::lround(v));
            }
    return im;
}

// Any bytes: every pixel value, so lossless round trips are exact tests.
Image random_image(int h, int w, int channels, uint64_t seed) {
    Image im{h, w, channels, std::vector<uint8_t>(static_cast<size_t>(h) * w * channels)};
    Rng rng(seed);
    for (auto& p : im.pixels) p = static_cast<uint8_t>(rng.below(256));
    return im;
}

double mean_abs_diff(const Image& a, const Image& b) {
    REQUIRE(a.pixels.size() == b.pixels.size());
    double sum = 0;
    for (size_t i = 0; i < a.pixels.size(); ++i) sum += std::abs(int(a.pixels[i]) - int(b.pixels[i]));
    return sum / static_cast<double>(a.pixels.size());
}

uint8_t luma(uint8_t r, uint8_t g, uint8_t b) {  // ITU-R 601, in exact arithmetic
    return static_cast<uint8_t>(std::lround((r * 299 + g * 587 + b * 114) / 1000.0));
}

Image to_grey(const Image& rgb) {
    Image g{rgb.height, rgb.width, 1, std::vector<uint8_t>(static_cast<size_t>(rgb.height) * rgb.width)};
    for (size_t i = 0; i < g.pixels.size(); ++i)
        g.pixels[i] = luma(rgb.pixels[3 * i], rgb.pixels[3 * i + 1], rgb.pixels[3 * i + 2]);
    return g;
}

Image to_rgb(const Image& grey) {
    Image c{grey.height, grey.width, 3, std::vector<uint8_t>(grey.pixels.size() * 3)};
    for (size_t i = 0; i < grey.pixels.size(); ++i) c.pixels[3 * i] = c.pixels[3 * i + 1] = c.pixels[3 * i + 2] = grey.pixels[i];
    return c;
}

// A PNG of any libpng colour type / bit depth, written with libpng directly (encode_png writes only 8-bit grey/RGB).
struct PngOut {
    std::vector<uint8_t> bytes;
};
void png_append(png_structp png, png_bytep data, png_size_t n) {
    auto* out = static_cast<PngOut*>(png_get_io_ptr(png));
    out->bytes.insert(out->bytes.end(), data, data + n);
}
std::vector<uint8_t> raw_png(int w, int h, int bit_depth, int color_type, const std::vector<std::vector<uint8_t>>& rows,
                             const std::vector<png_color>& palette = {}, const std::vector<uint8_t>& trans = {},
                             int interlace = PNG_INTERLACE_NONE) {
    PngOut out;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
    png_infop info = png_create_info_struct(png);
    REQUIRE(setjmp(png_jmpbuf(png)) == 0);
    png_set_write_fn(png, &out, png_append, nullptr);
    png_set_IHDR(png, info, w, h, bit_depth, color_type, interlace, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (interlace != PNG_INTERLACE_NONE) png_set_interlace_handling(png);
    if (!palette.empty()) png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
    if (!trans.empty()) png_set_tRNS(png, info, trans.data(), static_cast<int>(trans.size()), nullptr);
    png_write_info(png, info);
    std::vector<png_bytep> pointers;
    for (auto& row : rows) pointers.push_back(const_cast<png_bytep>(row.data()));
    png_write_image(png, pointers.data());  // writes the interlace passes when the IHDR asks for them
    png_write_end(png, nullptr);
    png_destroy_write_struct(&png, &info);
    return out.bytes;
}

}  // namespace

TEST_CASE("image_type_of: by extension, case-insensitive", "[image]") {
    CHECK(image_type_of("a/b.jpg") == ImageType::Jpeg);
    CHECK(image_type_of("x.JPEG") == ImageType::Jpeg);
    CHECK(image_type_of("x.Png") == ImageType::Png);
    CHECK(image_type_of("x.ppm") == ImageType::Pnm);
    CHECK(image_type_of("x.PGM") == ImageType::Pnm);
    CHECK(image_type_of("x.bmp") == ImageType::Bmp);
    CHECK_FALSE(image_type_of("x.gif"));
    CHECK_FALSE(image_type_of("x.jpg.txt"));
    CHECK_FALSE(image_type_of("jpg"));
    CHECK_FALSE(image_type_of("dir.jpg/file"));
}

TEST_CASE("lossless encoders round-trip exactly, grey and RGB, odd sizes", "[image]") {
    for (int channels : {1, 3}) {
        for (auto [h, w] : {std::pair{1, 1}, std::pair{23, 37}, std::pair{16, 5}}) {
            const Image im = random_image(h, w, channels, 7 + h * w + channels);
            const Image png = decode_image(encode_png(im), "x.png", channels);
            CHECK(png.height == h);
            CHECK(png.width == w);
            CHECK(png.channels == channels);
            CHECK(png.pixels == im.pixels);
            const Image pnm = decode_image(encode_pnm(im), "x.pnm", channels);
            CHECK(pnm.height == h);
            CHECK(pnm.width == w);
            CHECK(pnm.pixels == im.pixels);
            // BMP stores RGB: grey comes back through RGB (replicated, then luma of equal channels = the value).
            const Image bmp = decode_image(encode_bmp(im), "x.bmp", channels);
            CHECK(bmp.height == h);
            CHECK(bmp.width == w);
            CHECK(bmp.pixels == im.pixels);
        }
    }
}

TEST_CASE("JPEG round-trips within a stated error (quality 95, smooth picture: mean |diff| < 1.5 levels)", "[image]") {
    for (int channels : {1, 3}) {
        const Image im = smooth_image(61, 83, channels);
        const Image back = decode_image(encode_jpeg(im, 95), "x.jpg", channels);
        REQUIRE(back.height == 61);
        REQUIRE(back.width == 83);
        REQUIRE(back.channels == channels);
        CHECK(mean_abs_diff(im, back) < 1.5);
    }
}

TEST_CASE("channel conversion: grey replicated to RGB, RGB to grey with the ITU-R 601 weights", "[image]") {
    // Values from Pillow 9.4: Image.new("RGB", (1, 1), rgb).convert("L").
    const Image pil_in{1, 8, 3, {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 1, 2, 3, 128, 128, 127, 200, 13, 77, 37, 201, 5}};
    const std::vector<uint8_t> pil_out{76, 150, 29, 18, 2, 128, 76, 130};
    CHECK(decode_image(encode_png(pil_in), "x.png", 1).pixels == pil_out);
    // Any picture: within one level of the exact weights (Pillow rounds in 16-bit fixed point).
    const Image rgb = random_image(9, 13, 3, 1);
    for (const auto& bytes : {encode_png(rgb), encode_pnm(rgb), encode_bmp(rgb)}) {
        const Image g = decode_image(bytes, "x", 1);
        const Image ref = to_grey(rgb);
        REQUIRE(g.pixels.size() == ref.pixels.size());
        for (size_t i = 0; i < g.pixels.size(); ++i) CHECK(std::abs(int(g.pixels[i]) - int(ref.pixels[i])) <= 1);
    }
    const Image grey = random_image(9, 13, 1, 2);
    CHECK(decode_image(encode_png(grey), "x.png", 3).pixels == to_rgb(grey).pixels);
    CHECK(decode_image(encode_pnm(grey), "x.pgm", 3).pixels == to_rgb(grey).pixels);
    // A grey JPEG asked as RGB: three equal channels.
    const Image j = decode_image(encode_jpeg(smooth_image(16, 16, 1)), "x.jpg", 3);
    for (size_t i = 0; i < j.pixels.size(); i += 3) {
        CHECK(j.pixels[i] == j.pixels[i + 1]);
        CHECK(j.pixels[i] == j.pixels[i + 2]);
    }
    // A colour JPEG asked as grey: its luma, close to the luma of the RGB decode.
    const auto colour = encode_jpeg(smooth_image(32, 40, 3), 95);
    CHECK(mean_abs_diff(decode_image(colour, "x.jpg", 1), to_grey(decode_image(colour, "x.jpg", 3))) < 1.0);
}

TEST_CASE("the type is sniffed from the bytes: a .jpg that is a PNG decodes", "[image]") {
    TempDir dir;
    const Image im = random_image(5, 6, 3, 3);
    const std::string path = dir.write("actually_png.jpg", encode_png(im));
    CHECK(decode_image_file(path, 3).pixels == im.pixels);
    const std::string bmp_as_png = dir.write("actually_bmp.png", encode_bmp(im));
    CHECK(decode_image_file(bmp_as_png, 3).pixels == im.pixels);
}

TEST_CASE("JPEG DCT scaling decodes at the smallest of 1/2, 1/4, 1/8 that keeps both sides >= the minimum", "[image]") {
    const auto jpeg = encode_jpeg(smooth_image(600, 800, 3), 90);
    auto size_for = [&](int min_h, int min_w) {
        const Image im = decode_image(jpeg, "big.jpg", 3, min_h, min_w);
        return std::pair{im.height, im.width};
    };
    CHECK(size_for(0, 0) == std::pair{600, 800});
    CHECK(size_for(224, 224) == std::pair{300, 400});  // 1/2; 1/4 would give 150 rows
    CHECK(size_for(150, 200) == std::pair{150, 200});  // exactly 1/4
    CHECK(size_for(151, 200) == std::pair{300, 400});
    CHECK(size_for(150, 201) == std::pair{300, 400});  // the width decides too
    CHECK(size_for(64, 64) == std::pair{75, 100});     // 1/8
    CHECK(size_for(10, 10) == std::pair{75, 100});     // never below 1/8
    CHECK(size_for(301, 10) == std::pair{600, 800});   // 1/2 too small: full size
    CHECK(size_for(601, 10) == std::pair{600, 800});   // never upscaled
    CHECK(size_for(224, 0) == std::pair{600, 800});    // both minimums are needed to scale
    // Odd sizes round up (libjpeg's ceil(size * scale)).
    CHECK(decode_image(encode_jpeg(smooth_image(97, 131, 1)), "odd.jpg", 1, 20, 20).width == 33);
    // Other formats ignore the minimums.
    const Image png = decode_image(encode_png(smooth_image(40, 50, 3)), "x.png", 3, 8, 8);
    CHECK(png.height == 40);
    // The scaled decode shows the same picture: its mean level matches the full decode's.
    const Image full = decode_image(jpeg, "big.jpg", 3);
    const Image eighth = decode_image(jpeg, "big.jpg", 3, 64, 64);
    double a = 0, b = 0;
    for (auto v : full.pixels) a += v;
    for (auto v : eighth.pixels) b += v;
    CHECK(std::abs(a / full.pixels.size() - b / eighth.pixels.size()) < 1.0);
}

TEST_CASE("decode_image_into reuses the buffer and gives the same pixels as decode_image", "[image]") {
    Image out;
    const auto big = encode_png(random_image(30, 30, 3, 4));
    const auto small = encode_jpeg(smooth_image(10, 12, 3));
    decode_image_into(big, "big.png", 3, 0, 0, out);
    const auto* buffer = out.pixels.data();
    decode_image_into(small, "small.jpg", 3, 0, 0, out);
    CHECK(out.pixels.data() == buffer);
    CHECK(out.height == 10);
    CHECK(out.width == 12);
    CHECK(out.pixels == decode_image(small, "small.jpg", 3).pixels);
}

TEST_CASE("PNG variants: 16-bit, palette (with transparency), grey+alpha, RGBA, 1-bit grey", "[image]") {
    // 16-bit RGB: the high byte of each sample.
    std::vector<std::vector<uint8_t>> rows16(2, std::vector<uint8_t>(3 * 3 * 2));
    for (int y = 0; y < 2; ++y)
        for (int i = 0; i < 9; ++i) {
            rows16[y][2 * i] = static_cast<uint8_t>(20 * i + y);
            rows16[y][2 * i + 1] = 0xAB;
        }
    const Image im16 = decode_image(raw_png(3, 2, 16, PNG_COLOR_TYPE_RGB, rows16), "deep.png", 3);
    REQUIRE(im16.pixels.size() == 18);
    for (int y = 0; y < 2; ++y)
        for (int i = 0; i < 9; ++i) CHECK(im16.pixels[y * 9 + i] == 20 * i + y);

    // Palette with a tRNS chunk: colours looked up, transparency dropped.
    const std::vector<png_color> palette{{255, 0, 0}, {0, 255, 0}, {10, 20, 30}};
    const std::vector<std::vector<uint8_t>> idx{{0, 1, 2, 1}};
    const Image pal = decode_image(raw_png(4, 1, 8, PNG_COLOR_TYPE_PALETTE, idx, palette, {0, 128}), "pal.png", 3);
    CHECK(pal.pixels == std::vector<uint8_t>{255, 0, 0, 0, 255, 0, 10, 20, 30, 0, 255, 0});
    CHECK(decode_image(raw_png(4, 1, 8, PNG_COLOR_TYPE_PALETTE, idx, palette), "pal.png", 1).pixels ==
          std::vector<uint8_t>{76, 150, 18, 150});  // Pillow's convert("L") of those colours

    // Grey + alpha and RGBA: alpha dropped.
    const Image ga = decode_image(raw_png(2, 1, 8, PNG_COLOR_TYPE_GRAY_ALPHA, {{7, 0, 200, 255}}), "ga.png", 1);
    CHECK(ga.pixels == std::vector<uint8_t>{7, 200});
    const Image rgba = decode_image(raw_png(1, 1, 8, PNG_COLOR_TYPE_RGBA, {{1, 2, 3, 0}}), "rgba.png", 3);
    CHECK(rgba.pixels == std::vector<uint8_t>{1, 2, 3});

    // 1-bit grey: 0 and 255.
    const Image bits = decode_image(raw_png(8, 1, 1, PNG_COLOR_TYPE_GRAY, {{0b10100000}}), "bits.png", 1);
    CHECK(bits.pixels == std::vector<uint8_t>{255, 0, 255, 0, 0, 0, 0, 0});
    // Interlaced (Adam7) RGB: the same pixels as written.
    const Image pic = random_image(11, 13, 3, 31);
    std::vector<std::vector<uint8_t>> pic_rows;
    for (int y = 0; y < 11; ++y) pic_rows.emplace_back(pic.pixels.begin() + y * 39, pic.pixels.begin() + (y + 1) * 39);
    CHECK(decode_image(raw_png(13, 11, 8, PNG_COLOR_TYPE_RGB, pic_rows, {}, {}, PNG_INTERLACE_ADAM7), "adam7.png", 3)
              .pixels == pic.pixels);
    // Grey PNG asked as RGB: replicated.
    CHECK(decode_image(raw_png(2, 1, 8, PNG_COLOR_TYPE_GRAY, {{9, 99}}), "g.png", 3).pixels ==
          std::vector<uint8_t>{9, 9, 9, 99, 99, 99});
}

TEST_CASE("PNM: comments, maxval < 255 rescaled, 16-bit samples", "[image]") {
    const std::string header = "P5\n# made by hand\n3 1\n# another\n15\n";
    std::vector<uint8_t> bytes(header.begin(), header.end());
    bytes.insert(bytes.end(), {0, 15, 7});
    CHECK(decode_image(bytes, "x.pgm", 1).pixels == std::vector<uint8_t>{0, 255, 119});
    const std::string h16 = "P6 1 1 65535\n";
    std::vector<uint8_t> b16(h16.begin(), h16.end());
    b16.insert(b16.end(), {0xFF, 0xFF, 0x80, 0x00, 0x00, 0x00});
    CHECK(decode_image(b16, "x.ppm", 3).pixels == std::vector<uint8_t>{255, 128, 0});
}

TEST_CASE("BMP: top-down rows, 32-bit, 8-bit palette", "[image]") {
    const Image im = random_image(3, 5, 3, 9);
    auto bytes = encode_bmp(im);
    // Make it top-down: negate the height and reverse the row order.
    const int stride = 16;  // 5 * 3 = 15, padded to 16
    std::vector<uint8_t> flipped(bytes.begin(), bytes.begin() + 54);
    for (int y = 2; y >= 0; --y) flipped.insert(flipped.end(), bytes.begin() + 54 + y * stride, bytes.begin() + 54 + (y + 1) * stride);
    const int32_t neg = -3;
    std::memcpy(&flipped[22], &neg, 4);
    CHECK(decode_image(flipped, "td.bmp", 3).pixels == im.pixels);

    // Hand-made 32-bit (BGRX) and 8-bit palette files, 2x1 pixels.
    auto header = [](int bpp, uint32_t offset, uint32_t colors) {
        std::vector<uint8_t> h(54, 0);
        h[0] = 'B';
        h[1] = 'M';
        std::memcpy(&h[10], &offset, 4);
        const uint32_t dib = 40;
        std::memcpy(&h[14], &dib, 4);
        const int32_t w = 2, hh = 1;
        std::memcpy(&h[18], &w, 4);
        std::memcpy(&h[22], &hh, 4);
        h[26] = 1;
        h[28] = static_cast<uint8_t>(bpp);
        std::memcpy(&h[46], &colors, 4);
        return h;
    };
    auto b32 = header(32, 54, 0);
    b32.insert(b32.end(), {3, 2, 1, 0, 30, 20, 10, 0});
    CHECK(decode_image(b32, "x32.bmp", 3).pixels == std::vector<uint8_t>{1, 2, 3, 10, 20, 30});
    auto b8 = header(8, 54 + 8, 2);
    b8.insert(b8.end(), {50, 60, 70, 0, 5, 6, 7, 0});  // palette: BGRX
    b8.insert(b8.end(), {1, 0, 0, 0});                 // indices, row padded to 4 bytes
    CHECK(decode_image(b8, "x8.bmp", 3).pixels == std::vector<uint8_t>{7, 6, 5, 70, 60, 50});
    b8[54 + 8] = 2;  // outside the 2-colour palette
    CHECK_THROWS_WITH(decode_image(b8, "dir/x8.bmp", 3), Contains("dir/x8.bmp") && Contains("palette"));
}

TEST_CASE("bad files: every failure is an ImageDecodeError naming the file", "[image]") {
    TempDir dir;
    const auto jpeg = encode_jpeg(smooth_image(64, 64, 3), 90);
    const auto png = encode_png(random_image(32, 32, 3, 5));

    auto expect_error = [&](const std::string& name, const std::vector<uint8_t>& bytes, const std::string& what) {
        INFO(name);
        const std::string path = dir.write(name, bytes);
        CHECK_THROWS_AS(decode_image_file(path, 3), ImageDecodeError);
        CHECK_THROWS_WITH(decode_image_file(path, 3), Contains(path) && Contains(what));
        CHECK_THROWS_WITH(decode_image(bytes, name, 1), Contains(name));
        CHECK_THROWS_AS(decode_image(bytes, name, 3, 8, 8), InputError);  // exit code 2 upstream
    };
    expect_error("zero.jpg", {}, "empty file");
    expect_error("half.jpg", std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + jpeg.size() / 2), "JPEG");
    expect_error("no_eoi.jpg", std::vector<uint8_t>(jpeg.begin(), jpeg.end() - 2), "JPEG");
    expect_error("header_only.jpg", std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + 20), "JPEG header");
    expect_error("half.png", std::vector<uint8_t>(png.begin(), png.begin() + png.size() / 2), "truncated");
    expect_error("no_iend.png", std::vector<uint8_t>(png.begin(), png.end() - 6), "PNG");
    std::vector<uint8_t> bad_ihdr = png;
    bad_ihdr[18] ^= 0x40;  // a width byte: the IHDR CRC no longer matches
    expect_error("bad_header.png", bad_ihdr, "PNG");
    Rng rng(11);
    std::vector<uint8_t> noise(1000);
    for (auto& b : noise) b = static_cast<uint8_t>(rng.below(256));
    noise[0] = 0x12;
    expect_error("noise.png", noise, "not a JPEG, PNG");
    expect_error("text.jpg", {'h', 'e', 'l', 'l', 'o'}, "not a JPEG, PNG");
    expect_error("anim.png", {'G', 'I', 'F', '8', '9', 'a', 0, 0}, "GIF");
    // A JPEG start followed by noise.
    std::vector<uint8_t> jpeg_noise{0xFF, 0xD8, 0xFF};
    jpeg_noise.insert(jpeg_noise.end(), noise.begin(), noise.end());
    expect_error("noise.jpg", jpeg_noise, "JPEG");
    const auto pnm = encode_pnm(random_image(4, 4, 3, 6));
    expect_error("short.ppm", std::vector<uint8_t>(pnm.begin(), pnm.end() - 1), "truncated");
    expect_error("noheader.ppm", {'P', '6', ' ', '4'}, "truncated");
    expect_error("huge.ppm", {'P', '6', ' ', '9', '9', '9', '9', '9', ' ', '9', '9', '9', '9', '9', ' ', '2', '5', '5', '\n'},
                 "2^28");
    const auto bmp = encode_bmp(random_image(4, 4, 3, 6));
    expect_error("short.bmp", std::vector<uint8_t>(bmp.begin(), bmp.end() - 1), "truncated");
    expect_error("header.bmp", std::vector<uint8_t>(bmp.begin(), bmp.begin() + 30), "truncated");
    std::vector<uint8_t> rle = bmp;
    rle[30] = 1;  // BI_RLE8
    expect_error("rle.bmp", rle, "compressed");

    // Files that cannot be read at all.
    CHECK_THROWS_WITH(decode_image_file((dir.path / "missing.png").string(), 3), Contains("missing.png") && Contains("cannot open"));
    CHECK_THROWS_AS(decode_image_file((dir.path / "missing.png").string(), 3), ImageDecodeError);
    fs::create_directories(dir.path / "folder.jpg");
    CHECK_THROWS_WITH(decode_image_file((dir.path / "folder.jpg").string(), 3), Contains("folder.jpg"));
}

TEST_CASE("read_image_file: exact bytes into a reused buffer, growing and shrinking", "[image]") {
    TempDir dir;
    std::vector<uint8_t> big(100000), small(10);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7);
    for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<uint8_t>(200 - i);
    const std::string b = dir.write("big.bin", big), s = dir.write("small.bin", small), z = dir.write("zero.bin", {});
    std::vector<uint8_t> buffer;
    for (int round = 0; round < 2; ++round) {
        read_image_file(s, buffer);
        CHECK(buffer == small);
        read_image_file(b, buffer);
        CHECK(buffer == big);
        read_image_file(z, buffer);
        CHECK(buffer.empty());
    }
}

TEST_CASE("after any bad JPEG the (per-thread, reused) decoder still decodes good files", "[image]") {
    const Image im = smooth_image(40, 48, 3);
    const auto good = encode_jpeg(im, 90);
    const Image expected = decode_image(good, "good.jpg", 3);
    std::vector<uint8_t> noise{0xFF, 0xD8, 0xFF};
    for (int i = 0; i < 500; ++i) noise.push_back(static_cast<uint8_t>(i * 73 + 11));
    const std::vector<std::vector<uint8_t>> bad{
        noise, {good.begin(), good.begin() + good.size() / 2}, {good.begin(), good.begin() + 20},
        {good.begin(), good.end() - 2}};
    for (size_t i = 0; i < bad.size(); ++i) {
        INFO("bad file " << i);
        CHECK_THROWS_AS(decode_image(bad[i], "bad.jpg", 3), ImageDecodeError);
        CHECK(decode_image(good, "good.jpg", 3).pixels == expected.pixels);
        CHECK(decode_image(good, "good.jpg", 3, 10, 10).width == 12);  // and with DCT scaling (1/4)
    }
}

TEST_CASE("mutated files (flipped bytes, cuts) either decode or fail with an ImageDecodeError", "[image]") {
    // A small fuzz pass over every decoder (run under ASan/UBSan by scripts/sanitize.sh): never a crash, a hang or
    // another exception type. Sizes stay small so it takes well under a second.
    const Image rgb = smooth_image(24, 30, 3);
    const Image grey = smooth_image(17, 13, 1);
    const std::vector<std::vector<uint8_t>> seeds{encode_jpeg(rgb), encode_jpeg(grey), encode_png(rgb), encode_png(grey),
                                                  encode_pnm(rgb), encode_pnm(grey), encode_bmp(rgb)};
    Rng rng(2024);
    int decoded = 0, failed = 0;
    for (const auto& seed : seeds) {
        for (int trial = 0; trial < 150; ++trial) {
            std::vector<uint8_t> bytes = seed;
            const int flips = 1 + static_cast<int>(rng.below(4));
            for (int f = 0; f < flips; ++f) {
                // Mostly in the first 64 bytes (headers), sometimes anywhere.
                const size_t limit = rng.below(3) == 0 ? bytes.size() : std::min<size_t>(64, bytes.size());
                bytes[rng.below(limit)] ^= static_cast<uint8_t>(1 + rng.below(255));
            }
            if (rng.below(4) == 0) bytes.resize(rng.below(bytes.size()));
            for (int channels : {1, 3}) {
                try {
                    const Image im = decode_image(bytes, "fuzz", channels, trial % 2 ? 8 : 0, trial % 2 ? 8 : 0);
                    REQUIRE(im.pixels.size() == static_cast<size_t>(im.height) * im.width * channels);
                    ++decoded;
                } catch (const ImageDecodeError& e) {
                    REQUIRE(std::string(e.what()).rfind("fuzz: ", 0) == 0);
                    ++failed;
                }
            }
        }
    }
    CHECK(decoded > 0);
    CHECK(failed > 0);
}

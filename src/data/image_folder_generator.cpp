#include "ringtrain/data/image_folder_generator.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/image_transform.hpp"

namespace ringtrain::data {

namespace fs = std::filesystem;

namespace {

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!f) throw InputError("--out: cannot write '" + path + "'");
}

// A box blur of radius r (separable, edges clamped).
Image box_blur(const Image& src, int r) {
    const int h = src.height, w = src.width, c = src.channels;
    auto at = [](const Image& im, int y, int x, int ch) {
        return int(im.pixels[(size_t(y) * im.width + x) * im.channels + ch]);
    };
    Image across = src, out = src;
    for (int pass = 0; pass < 2; ++pass) {
        const Image& in = pass == 0 ? src : across;
        Image& dst = pass == 0 ? across : out;
        for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x)
                for (int ch = 0; ch < c; ++ch) {
                    int sum = 0;
                    for (int d = -r; d <= r; ++d)
                        sum += pass == 0 ? at(in, y, std::clamp(x + d, 0, w - 1), ch) : at(in, std::clamp(y + d, 0, h - 1), x, ch);
                    dst.pixels[(size_t(y) * w + x) * c + ch] = static_cast<uint8_t>((sum + r) / (2 * r + 1));
                }
    }
    return out;
}

Image crop(const Image& src, int top, int left, int side, bool mirror) {
    Image out{side, side, src.channels, std::vector<uint8_t>(size_t(side) * side * src.channels)};
    for (int y = 0; y < side; ++y)
        for (int x = 0; x < side; ++x)
            for (int ch = 0; ch < src.channels; ++ch)
                out.pixels[(size_t(y) * side + x) * src.channels + ch] =
                    src.pixels[(size_t(top + y) * src.width + left + (mirror ? side - 1 - x : x)) * src.channels + ch];
    return out;
}

}  // namespace

std::vector<std::string> pattern_class_names(int classes) {
    // Sorted as written: label i (sorted position) is pattern i.
    static const char* names[kPatternClasses] = {"0_horizontal", "1_vertical", "2_diagonal",
                                                 "3_antidiagonal", "4_checks", "5_rings"};
    if (classes < 1 || classes > kPatternClasses)
        throw InputError("--classes: " + std::to_string(classes) + " is not from 1 to " + std::to_string(kPatternClasses));
    return {names, names + classes};
}

Image make_pattern_image(int pattern, int height, int width, int channels, Rng& rng) {
    check(pattern >= 0 && pattern < kPatternClasses && height > 0 && width > 0 && (channels == 1 || channels == 3),
          "make_pattern_image: a pattern from 0 to 5, a positive size and 1 or 3 channels");
    const double two_pi = 2.0 * std::numbers::pi;
    const double period = rng.uniform(4.0f, 9.0f) * std::max(1.0, std::min(height, width) / 32.0);
    const double phase = rng.uniform(0.0f, float(two_pi));
    const double cy = rng.uniform(0.0f, float(height)), cx = rng.uniform(0.0f, float(width));
    float fg[3], bg[3];
    for (int c = 0; c < 3; ++c) {
        fg[c] = rng.uniform(0.0f, 255.0f);
        bg[c] = rng.uniform(0.0f, 255.0f);
    }
    // Keep the stripes visible: colours close in brightness become a light one on a dark one.
    if (std::fabs((fg[0] + fg[1] + fg[2]) - (bg[0] + bg[1] + bg[2])) < 240.0f)
        for (int c = 0; c < 3; ++c) {
            fg[c] = 255.0f - 0.3f * fg[c];
            bg[c] *= 0.3f;
        }
    Image im{height, width, channels, std::vector<uint8_t>(size_t(height) * width * channels)};
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) {
            double u = 0;
            switch (pattern) {
                case 0: u = y; break;
                case 1: u = x; break;
                case 2: u = (x + y) / std::numbers::sqrt2; break;
                case 3: u = (x - y) / std::numbers::sqrt2; break;
                case 4: u = 0; break;
                default: u = std::hypot(x - cx, y - cy); break;
            }
            double v = pattern == 4 ? std::sin(two_pi * x / period + phase) * std::sin(two_pi * y / period + phase)
                                    : std::sin(two_pi * u / period + phase);
            v = 0.5 + 0.5 * v;
            const float noise = 12.0f * rng.normal();
            for (int c = 0; c < channels; ++c) {
                const float a = channels == 1 ? (fg[0] + fg[1] + fg[2]) / 3 : fg[c];
                const float b = channels == 1 ? (bg[0] + bg[1] + bg[2]) / 3 : bg[c];
                const float p = static_cast<float>(b + (a - b) * v) + noise;
                im.pixels[(size_t(y) * width + x) * channels + c] =
                    static_cast<uint8_t>(std::clamp(std::lround(p), 0L, 255L));
            }
        }
    return im;
}

namespace {

// The writers fill a whole folder with their own file names: into one that holds files they would overwrite some
// and leave the rest, mixing two generations (or a user's own images) under one class. Only a new or empty one.
void check_out_folder(const std::string& out) {
    std::error_code ec;
    const fs::file_status st = fs::status(out, ec);
    if (!fs::exists(st)) return;
    if (!fs::is_directory(st)) throw InputError("--out: '" + out + "' exists and is not a folder; name a new folder");
    if (!fs::is_empty(out, ec) || ec)
        throw InputError("--out: '" + out + "' exists and is not empty; remove it or name a new folder (the images "
                         "would overwrite some of its files and mix with the rest)");
}

}  // namespace

std::vector<std::string> write_pattern_image_folder(const ImageFolderSpec& spec) {
    const std::vector<std::string> names = pattern_class_names(spec.classes);
    if (spec.per_class < 1) throw InputError("--per-class: must be at least 1 (got " + std::to_string(spec.per_class) + ")");
    check_out_folder(spec.out);
    if (spec.height < 1 || spec.width < 1 || spec.height > 16384 || spec.width > 16384)
        throw InputError("--size: " + std::to_string(spec.height) + "x" + std::to_string(spec.width) +
                         " is not a size from 1x1 to 16384x16384");
    Rng rng(spec.seed);
    std::vector<std::string> written;
    int n = 0;
    for (int k = 0; k < spec.classes; ++k) {
        const fs::path dir = fs::path(spec.out) / names[static_cast<size_t>(k)];
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) throw InputError("--out: cannot create '" + dir.string() + "': " + ec.message());
        for (int i = 0; i < spec.per_class; ++i, ++n) {
            const Image im = make_pattern_image(k, spec.height, spec.width, spec.channels, rng);
            static const char* mixed[] = {".jpg", ".png", ".ppm", ".bmp"};
            const std::string ext = spec.format == ImageFileFormat::Jpeg  ? ".jpg"
                                    : spec.format == ImageFileFormat::Png ? ".png"
                                                                          : mixed[n % 4];
            std::vector<uint8_t> bytes = ext == ".jpg"   ? encode_jpeg(im, spec.jpeg_quality)
                                         : ext == ".png" ? encode_png(im)
                                         : ext == ".ppm" ? encode_pnm(im)
                                                         : encode_bmp(im);
            char name[32];
            std::snprintf(name, sizeof name, "img_%05d", i);
            const std::string path = (dir / (name + (spec.channels == 1 && ext == ".ppm" ? std::string(".pgm") : ext))).string();
            write_file(path, bytes);
            written.push_back(path);
        }
    }
    return written;
}

std::vector<std::string> write_quality_image_folder(const std::vector<std::string>& photos, const ImageFolderSpec& spec) {
    if (photos.empty()) throw InputError("--photos: no photo given");
    if (spec.per_class < 1) throw InputError("--per-class: must be at least 1 (got " + std::to_string(spec.per_class) + ")");
    check_out_folder(spec.out);
    std::vector<Image> sources;
    for (const std::string& p : photos) sources.push_back(decode_image_file(p, spec.channels));
    Rng rng(spec.seed);
    for (const char* cls : {"degraded", "sharp"}) {
        std::error_code ec;
        fs::create_directories(fs::path(spec.out) / cls, ec);
        if (ec) throw InputError("--out: cannot create '" + (fs::path(spec.out) / cls).string() + "': " + ec.message());
    }
    std::vector<std::string> written;
    for (int i = 0; i < spec.per_class; ++i) {
        const Image& src = sources[rng.below(sources.size())];
        const int shorter = std::min(src.height, src.width);
        const int side = std::max(8, static_cast<int>(shorter * rng.uniform(0.25f, 1.0f)));
        const int top = static_cast<int>(rng.below(static_cast<uint64_t>(src.height - side + 1)));
        const int left = static_cast<int>(rng.below(static_cast<uint64_t>(src.width - side + 1)));
        const Image sharp = resize_image(crop(src, top, left, side, rng.below(2) == 1), spec.height, spec.width);
        const Image degraded = rng.below(2) == 0
                                   ? box_blur(sharp, 1 + static_cast<int>(rng.below(2)))
                                   : decode_image(encode_jpeg(sharp, 5 + static_cast<int>(rng.below(11))), "degraded", spec.channels);
        char name[32];
        std::snprintf(name, sizeof name, "img_%05d.jpg", i);
        for (const auto& [cls, im] : {std::pair<const char*, const Image*>{"sharp", &sharp}, {"degraded", &degraded}}) {
            const std::string path = (fs::path(spec.out) / cls / name).string();
            write_file(path, encode_jpeg(*im, spec.jpeg_quality));
            written.push_back(path);
        }
    }
    return written;
}

}  // namespace ringtrain::data

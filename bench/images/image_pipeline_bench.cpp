// bench_image_pipeline: the training input pipeline of one worker thread (read file, decode, RandomResizedCrop,
// horizontal flip, normalise to CHW floats) over every image of a folder, in images/s; the counterpart of
// torchvision_pipeline.py (compare.sh runs both). --make-folder writes the test folders with our JPEG encoder, so
// nothing is committed or downloaded.
//
//   bench_image_pipeline --make-folder DIR --count N --height H --width W [--classes K] [--quality Q] [--seed S]
//   bench_image_pipeline --dir DIR --size H W [--mode crop|whole|full] [--eval] [--passes N] [--channels 1|3]
//                        [--extent auto|whole]
// Modes: crop (default) = decode_transform_image (the crop box drawn on the header's size, only it decoded, at a DCT
// scale); whole = decode_image at the DCT scale that keeps the whole picture >= the target, then transform_image;
// full = decode_image at full size, then transform_image (what torchvision does).
// Passes are epochs, reported separately: the first, and the later ones together. In crop mode with --extent auto
// (default) the first pass entropy-decodes every file to its end (DecodeExtent::WholeFile) and later passes stop
// after the crop's last row (RegionRows: every file decoded completely in pass 1), as ImageFolderDataset does;
// --extent whole keeps WholeFile in every pass.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "ringtrain/core/rng.hpp"
#include "ringtrain/data/image.hpp"
#include "ringtrain/data/image_transform.hpp"

using namespace ringtrain;
using namespace ringtrain::data;
namespace fs = std::filesystem;

namespace {

[[noreturn]] void usage(const std::string& why) {
    std::cerr << "bench_image_pipeline: " << why << "\n"
              << "usage: bench_image_pipeline --make-folder DIR --count N --height H --width W [--classes K] "
                 "[--quality Q] [--seed S]\n"
                 "       bench_image_pipeline --dir DIR --size H W [--mode crop|whole|full] [--eval] [--passes N] "
                 "[--channels 1|3] [--extent auto|whole]\n";
    std::exit(2);
}

// A photo-like picture: colour gradients and waves (large-scale structure), a few sharp-edged shapes (edges are most
// of a real photo's high-frequency content) and sensor-like noise, mostly in luma. At quality 90 this gives about
// 1.5-2 bits a pixel at 1600x1200, within the range of camera photos (and more at 96x96, where edges are denser).
Image synthetic_photo(int h, int w, Rng& rng) {
    Image im{h, w, 3, std::vector<uint8_t>(static_cast<size_t>(h) * w * 3)};
    float base[3], gx[3], gy[3], amp[3], fx[3], fy[3], phase[3];
    for (int c = 0; c < 3; ++c) {
        base[c] = rng.uniform(40, 200);
        gx[c] = rng.uniform(-60, 60) / w;
        gy[c] = rng.uniform(-60, 60) / h;
        amp[c] = rng.uniform(10, 40);
        fx[c] = rng.uniform(2, 12) * 6.2832f / w;
        fy[c] = rng.uniform(2, 12) * 6.2832f / h;
        phase[c] = rng.uniform(0, 6.2832f);
    }
    struct Disc {
        float y, x, r2, colour[3];
    };
    std::vector<Disc> discs(12);
    for (auto& d : discs) {
        d.y = rng.uniform(0, static_cast<float>(h));
        d.x = rng.uniform(0, static_cast<float>(w));
        const float r = rng.uniform(0.03f, 0.2f) * static_cast<float>(std::min(h, w));
        d.r2 = r * r;
        for (float& c : d.colour) c = rng.uniform(-70, 70);
    }
    uint64_t noise = rng.next_u64() | 1;
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
            noise ^= noise << 13;
            noise ^= noise >> 7;
            noise ^= noise << 17;
            const float luma_noise = static_cast<float>(noise & 15) - 7.5f;
            const float chroma_noise = static_cast<float>((noise >> 8) & 3) - 1.5f;
            float shape[3] = {0, 0, 0};
            for (const Disc& d : discs)
                if ((y - d.y) * (y - d.y) + (x - d.x) * (x - d.x) < d.r2)
                    for (int c = 0; c < 3; ++c) shape[c] += d.colour[c];
            for (int c = 0; c < 3; ++c) {
                const float v = base[c] + gx[c] * x + gy[c] * y + amp[c] * std::sin(fx[c] * x + fy[c] * y + phase[c]) +
                                shape[c] + luma_noise + (c == 1 ? 0 : chroma_noise);
                im.pixels[(static_cast<size_t>(y) * w + x) * 3 + c] = static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
            }
        }
    return im;
}

int make_folder(const std::string& dir, int count, int h, int w, int classes, int quality, uint64_t seed) {
    Rng rng(seed);
    size_t bytes = 0;
    for (int i = 0; i < count; ++i) {
        const fs::path folder = fs::path(dir) / ("class_" + std::to_string(i % classes));
        fs::create_directories(folder);
        const auto jpeg = encode_jpeg(synthetic_photo(h, w, rng), quality);
        char name[32];
        std::snprintf(name, sizeof name, "img_%06d.jpg", i);
        std::ofstream(folder / name, std::ios::binary)
            .write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
        bytes += jpeg.size();
    }
    std::printf("wrote %d %dx%d JPEGs (quality %d, %.2f bits/pixel) under %s\n", count, w, h, quality,
                8.0 * bytes / (static_cast<double>(count) * h * w), dir.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::string make_dir, dir;
    int count = 0, h = 0, w = 0, classes = 2, quality = 90, passes = 1, channels = 3;
    uint64_t seed = 1;
    std::string mode = "crop", extent = "auto";
    bool eval = false;
    auto need = [&](int i, int n) {
        if (i + n >= argc) usage(std::string(argv[i]) + " needs " + std::to_string(n) + " value(s)");
    };
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--make-folder") need(i, 1), make_dir = argv[++i];
        else if (a == "--dir") need(i, 1), dir = argv[++i];
        else if (a == "--count") need(i, 1), count = std::atoi(argv[++i]);
        else if (a == "--height") need(i, 1), h = std::atoi(argv[++i]);
        else if (a == "--width") need(i, 1), w = std::atoi(argv[++i]);
        else if (a == "--size") need(i, 2), h = std::atoi(argv[i + 1]), w = std::atoi(argv[i + 2]), i += 2;
        else if (a == "--classes") need(i, 1), classes = std::atoi(argv[++i]);
        else if (a == "--quality") need(i, 1), quality = std::atoi(argv[++i]);
        else if (a == "--seed") need(i, 1), seed = std::strtoull(argv[++i], nullptr, 10);
        else if (a == "--passes") need(i, 1), passes = std::atoi(argv[++i]);
        else if (a == "--channels") need(i, 1), channels = std::atoi(argv[++i]);
        else if (a == "--mode") need(i, 1), mode = argv[++i];
        else if (a == "--extent") need(i, 1), extent = argv[++i];
        else if (a == "--eval") eval = true;
        else usage("unknown argument " + a);
    }
    if (!make_dir.empty()) {
        if (count <= 0 || h <= 0 || w <= 0 || classes <= 0) usage("--make-folder needs --count, --height, --width > 0");
        return make_folder(make_dir, count, h, w, classes, quality, seed);
    }
    if (dir.empty() || h <= 0 || w <= 0 || passes <= 0 || (channels != 1 && channels != 3))
        usage("--dir DIR --size H W are required");
    if (mode != "crop" && mode != "whole" && mode != "full") usage("--mode is crop, whole or full");
    if (extent != "auto" && extent != "whole") usage("--extent is auto or whole");

    std::vector<std::string> files;
    for (const auto& entry : fs::recursive_directory_iterator(dir))
        if (entry.is_regular_file() && image_type_of(entry.path().string())) files.push_back(entry.path().string());
    std::sort(files.begin(), files.end());
    if (files.empty()) usage("no image files under " + dir);

    // torchvision's ImageNet training transforms: RandomResizedCrop(scale 0.08..1), RandomHorizontalFlip, Normalize.
    ImageTransformOptions options;
    options.height = h;
    options.width = w;
    options.channels = channels;
    options.mean = channels == 3 ? std::vector<float>{0.485f, 0.456f, 0.406f} : std::vector<float>{0.5f};
    options.stddev = channels == 3 ? std::vector<float>{0.229f, 0.224f, 0.225f} : std::vector<float>{0.25f};
    options.augment.resized_crop_min_scale = 0.08f;
    options.augment.resized_crop_max_scale = 1.0f;
    options.augment.hflip = true;

    // One worker's buffers, reused sample after sample; samples land in a batch of 32 as a loader's would.
    constexpr int kBatch = 32;
    const size_t sample_floats = static_cast<size_t>(channels) * h * w;
    std::vector<float> batch(kBatch * sample_floats);
    std::vector<uint8_t> bytes;
    Image image;
    double checksum = 0;
    size_t done = 0;
    // Wall and CPU seconds of the first pass, and of the later ones together. CPU seconds too: on a shared machine
    // the wall clock also counts the time other processes held the core.
    struct Span {
        size_t images = 0;
        double seconds = 0, cpu_seconds = 0;
    } first, later;
    for (int pass = 0; pass < passes; ++pass) {
        const DecodeExtent pass_extent =
            pass > 0 && extent == "auto" ? DecodeExtent::RegionRows : DecodeExtent::WholeFile;
        const auto start = std::chrono::steady_clock::now();
        const std::clock_t cpu_start = std::clock();
        for (size_t i = 0; i < files.size(); ++i, ++done) {
            read_image_file(files[i], bytes);
            Rng rng(seed * 1000003 + done);
            float* out = batch.data() + (done % kBatch) * sample_floats;
            if (mode == "crop") {
                decode_transform_image(bytes, files[i], options, eval ? nullptr : &rng, image, out, pass_extent);
            } else {
                const bool dct = mode == "whole";
                decode_image_into(bytes, files[i], channels, dct ? h : 0, dct ? w : 0, image);
                transform_image(image, options, eval ? nullptr : &rng, out);
            }
            checksum += out[sample_floats / 2];
        }
        Span& span = pass == 0 ? first : later;
        span.images += files.size();
        span.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        span.cpu_seconds += static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    }
    auto report = [&](const char* which, const Span& span) {
        std::printf("ours (%s%s, %s): %zu images of %s to %dx%dx%d in %.3f s (%.3f CPU s): images/s %.1f, per "
                    "CPU-second %.1f (checksum %.3f)\n",
                    mode.c_str(), eval ? " eval" : "", which, span.images, dir.c_str(), channels, h, w, span.seconds,
                    span.cpu_seconds, span.images / span.seconds, span.images / span.cpu_seconds, checksum);
    };
    report("epoch 1", first);
    if (passes > 1) report(extent == "auto" && mode == "crop" ? "later epochs, crop rows only" : "later epochs", later);
    return 0;
}

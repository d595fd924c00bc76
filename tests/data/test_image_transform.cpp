// Image transforms against direct, slow references: resize (area where shrinking, bilinear where growing) computed
// pixel by pixel from the definition, the torchvision RandomResizedCrop box rules, pad-and-crop, flip and
// normalisation composed step by step with the same seeded draws as the fused transform_image.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/data/image_transform.hpp"
#include "../../src/data/image_codecs.hpp"  // decode_jpeg_region, to check a region's pixels directly

using namespace ringtrain;
using namespace ringtrain::data;

namespace {

Image random_image(int h, int w, int channels, uint64_t seed) {
    Image im{h, w, channels, std::vector<uint8_t>(static_cast<size_t>(h) * w * channels)};
    Rng rng(seed);
    for (auto& p : im.pixels) p = static_cast<uint8_t>(rng.below(256));
    return im;
}

uint8_t at(const Image& im, int y, int x, int c) {
    return im.pixels[(static_cast<size_t>(y) * im.width + x) * im.channels + c];
}

// Weight of source index j in output index i along one axis, from the definitions: the overlap of [j, j+1) with
// the output's footprint [i*s, (i+1)*s) over s when shrinking; a triangle around the clamped half-pixel centre
// when growing.
double axis_weight(int i, int j, int src, int dst) {
    const double s = static_cast<double>(src) / dst;
    if (src == dst) return i == j ? 1.0 : 0.0;
    if (src > dst) {
        const double overlap = std::min(j + 1.0, (i + 1) * s) - std::max<double>(j, i * s);
        return std::max(0.0, overlap) / s;
    }
    const double centre = std::clamp((i + 0.5) * s - 0.5, 0.0, src - 1.0);
    return std::max(0.0, 1.0 - std::abs(centre - j));
}

Image slow_resize(const Image& src, int h, int w) {
    Image out{h, w, src.channels, std::vector<uint8_t>(static_cast<size_t>(h) * w * src.channels)};
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
            for (int c = 0; c < src.channels; ++c) {
                double sum = 0;
                for (int sy = 0; sy < src.height; ++sy) {
                    const double wy = axis_weight(y, sy, src.height, h);
                    if (wy == 0) continue;
                    for (int sx = 0; sx < src.width; ++sx) sum += wy * axis_weight(x, sx, src.width, w) * at(src, sy, sx, c);
                }
                out.pixels[(static_cast<size_t>(y) * w + x) * src.channels + c] =
                    static_cast<uint8_t>(std::lround(std::clamp(sum, 0.0, 255.0)));
            }
    return out;
}

int max_abs_diff(const Image& a, const Image& b) {
    REQUIRE(a.pixels.size() == b.pixels.size());
    int m = 0;
    for (size_t i = 0; i < a.pixels.size(); ++i) m = std::max(m, std::abs(int(a.pixels[i]) - int(b.pixels[i])));
    return m;
}

Image crop(const Image& src, const CropBox& b) {
    Image out{b.height, b.width, src.channels, {}};
    for (int y = 0; y < b.height; ++y)
        for (int x = 0; x < b.width; ++x)
            for (int c = 0; c < src.channels; ++c) out.pixels.push_back(at(src, b.top + y, b.left + x, c));
    return out;
}

// Zero-pad by p on every side, then take the h x w window at (top, left) of the padded picture.
Image pad_crop(const Image& src, int p, int top, int left) {
    Image out{src.height, src.width, src.channels, {}};
    for (int y = 0; y < src.height; ++y)
        for (int x = 0; x < src.width; ++x)
            for (int c = 0; c < src.channels; ++c) {
                const int sy = y + top - p, sx = x + left - p;
                const bool inside = sy >= 0 && sy < src.height && sx >= 0 && sx < src.width;
                out.pixels.push_back(inside ? at(src, sy, sx, c) : 0);
            }
    return out;
}

Image mirror(const Image& src) {
    Image out = src;
    for (int y = 0; y < src.height; ++y)
        for (int x = 0; x < src.width; ++x)
            for (int c = 0; c < src.channels; ++c)
                out.pixels[(static_cast<size_t>(y) * src.width + x) * src.channels + c] = at(src, y, src.width - 1 - x, c);
    return out;
}

std::vector<float> normalise(const Image& im, const std::vector<float>& mean, const std::vector<float>& sd) {
    std::vector<float> out;
    for (int c = 0; c < im.channels; ++c)
        for (int y = 0; y < im.height; ++y)
            for (int x = 0; x < im.width; ++x) {
                const float m = mean.empty() ? 0.0f : mean[c], s = sd.empty() ? 1.0f : sd[c];
                out.push_back((at(im, y, x, c) / 255.0f - m) / s);
            }
    return out;
}

void check_close(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i)
        if (std::abs(a[i] - b[i]) > 1e-5f) FAIL("element " << i << ": " << a[i] << " vs " << b[i]);
}

}  // namespace

TEST_CASE("resize_image matches the direct area / bilinear definition on awkward sizes", "[image]") {
    struct Case {
        int sh, sw, dh, dw;
    };
    for (const Case& k : {Case{37, 53, 8, 11}, Case{5, 7, 13, 17}, Case{20, 5, 7, 9}, Case{9, 31, 21, 4},
                          Case{1, 1, 3, 4}, Case{64, 64, 1, 1}, Case{6, 6, 6, 6}, Case{1, 40, 1, 3}}) {
        for (int channels : {1, 3}) {
            INFO(k.sh << "x" << k.sw << " -> " << k.dh << "x" << k.dw << ", " << channels << " channels");
            const Image src = random_image(k.sh, k.sw, channels, 17 + k.sh * k.dw);
            const Image fast = resize_image(src, k.dh, k.dw);
            CHECK(fast.height == k.dh);
            CHECK(fast.width == k.dw);
            CHECK(fast.channels == channels);
            CHECK(max_abs_diff(fast, slow_resize(src, k.dh, k.dw)) <= 1);  // float vs double rounding at .5
        }
    }
    // Same size is a copy; a constant picture stays constant at any size.
    const Image src = random_image(6, 9, 3, 3);
    CHECK(resize_image(src, 6, 9).pixels == src.pixels);
    Image flat{13, 7, 1, std::vector<uint8_t>(13 * 7, 77)};
    for (auto [h, w] : {std::pair{3, 2}, std::pair{30, 41}, std::pair{13, 50}})
        for (auto v : resize_image(flat, h, w).pixels) REQUIRE(v == 77);
}

TEST_CASE("resize_image: an exact 2x shrink is the mean of 2x2 blocks", "[image]") {
    const Image src{2, 4, 1, {10, 20, 100, 101, 30, 40, 102, 103}};
    CHECK(resize_image(src, 1, 2).pixels == std::vector<uint8_t>{25, 102});  // 25 and 101.5 -> 102
}

TEST_CASE("random_resized_crop_box: inside the image, area and ratio within torchvision's limits", "[image]") {
    Rng rng(5);
    double smallest = 1, largest = 0, lowest_ratio = 10, highest_ratio = 0;
    for (int i = 0; i < 3000; ++i) {
        const int h = 50 + static_cast<int>(rng.below(300)), w = 50 + static_cast<int>(rng.below(300));
        const CropBox b = random_resized_crop_box(h, w, 0.08f, 1.0f, rng);
        REQUIRE(b.top >= 0);
        REQUIRE(b.left >= 0);
        REQUIRE(b.height >= 1);
        REQUIRE(b.width >= 1);
        REQUIRE(b.top + b.height <= h);
        REQUIRE(b.left + b.width <= w);
        const double fraction = static_cast<double>(b.height) * b.width / (static_cast<double>(h) * w);
        const double ratio = static_cast<double>(b.width) / b.height;
        // Rounding each side to an integer moves the area and the ratio a little off the drawn values.
        CHECK(fraction >= 0.08 * 0.9);
        CHECK(fraction <= 1.0);
        CHECK(ratio >= 0.75 * 0.9);
        CHECK(ratio <= 4.0 / 3.0 * 1.1);
        smallest = std::min(smallest, fraction);
        largest = std::max(largest, fraction);
        lowest_ratio = std::min(lowest_ratio, ratio);
        highest_ratio = std::max(highest_ratio, ratio);
    }
    // The draws cover the ranges.
    CHECK(smallest < 0.1);
    CHECK(largest > 0.9);
    CHECK(lowest_ratio < 0.8);
    CHECK(highest_ratio > 1.25);

    // A narrow scale range keeps to it.
    for (int i = 0; i < 200; ++i) {
        const CropBox b = random_resized_crop_box(200, 200, 0.25f, 0.25f, rng);
        CHECK(std::abs(b.height * b.width / 40000.0 - 0.25) < 0.02);
    }
}

TEST_CASE("random_resized_crop_box: no try fits -> the centre crop with the ratio clamped to [3/4, 4/3]", "[image]") {
    Rng rng(1);
    // A 10 x 1000 strip: no box of 90-100% of its area has a ratio within 4/3.
    CropBox b = random_resized_crop_box(10, 1000, 0.9f, 1.0f, rng);
    CHECK(b.height == 10);
    CHECK(b.width == 13);  // round(10 * 4/3)
    CHECK(b.top == 0);
    CHECK(b.left == (1000 - 13) / 2);
    b = random_resized_crop_box(1000, 10, 0.9f, 1.0f, rng);
    CHECK(b.width == 10);
    CHECK(b.height == 13);  // round(10 / (3/4))
    CHECK(b.top == (1000 - 13) / 2);
    CHECK_THROWS_AS(random_resized_crop_box(10, 10, 0.0f, 1.0f, rng), InputError);
    CHECK_THROWS_AS(random_resized_crop_box(10, 10, 0.5f, 0.4f, rng), InputError);
}

TEST_CASE("transform_image without an rng: resize, then (v/255 - mean) / std in CHW order", "[image]") {
    const Image src = random_image(37, 53, 3, 8);
    ImageTransformOptions opt;
    opt.height = 8;
    opt.width = 11;
    opt.mean = {0.485f, 0.456f, 0.406f};
    opt.stddev = {0.229f, 0.224f, 0.225f};
    opt.augment.hflip = true;  // ignored without an rng
    opt.augment.random_crop_padding = 4;
    std::vector<float> out(3 * 8 * 11);
    transform_image(src, opt, nullptr, out.data());
    check_close(out, normalise(resize_image(src, 8, 11), opt.mean, opt.stddev));

    // Known values: 255 with mean 0.5, std 0.25 -> 2; 0 -> -2; empty mean/std -> v / 255.
    const Image grey{1, 2, 1, {255, 0}};
    ImageTransformOptions g;
    g.height = 1;
    g.width = 2;
    g.channels = 1;
    g.mean = {0.5f};
    g.stddev = {0.25f};
    std::vector<float> two(2);
    transform_image(grey, g, nullptr, two.data());
    CHECK(two[0] == Approx(2.0f));
    CHECK(two[1] == Approx(-2.0f));
    g.mean.clear();
    g.stddev.clear();
    transform_image(grey, g, nullptr, two.data());
    CHECK(two[0] == 1.0f);
    CHECK(two[1] == 0.0f);
}

TEST_CASE("transform_image with an rng equals crop, resize, pad-crop, flip and normalise composed by hand", "[image]") {
    for (int channels : {1, 3}) {
        const Image src = random_image(45, 61, channels, 21 + channels);
        ImageTransformOptions opt;
        opt.height = 16;
        opt.width = 20;
        opt.channels = channels;
        opt.mean.assign(channels, 0.4f);
        opt.stddev.assign(channels, 0.3f);
        opt.augment.resized_crop_min_scale = 0.08f;
        opt.augment.resized_crop_max_scale = 1.0f;
        opt.augment.random_crop_padding = 3;
        opt.augment.hflip = true;
        int flips = 0, shifted = 0;
        for (uint64_t seed = 0; seed < 40; ++seed) {
            Rng fused(seed), reference(seed);
            std::vector<float> out(static_cast<size_t>(channels) * 16 * 20);
            transform_image(src, opt, &fused, out.data());

            const CropBox box = random_resized_crop_box(45, 61, 0.08f, 1.0f, reference);
            Image im = resize_image(crop(src, box), 16, 20);
            const int top = static_cast<int>(reference.below(7)), left = static_cast<int>(reference.below(7));
            im = pad_crop(im, 3, top, left);
            const bool flip = reference.uniform() < 0.5f;
            if (flip) im = mirror(im);
            flips += flip;
            shifted += (top != 3 || left != 3);
            INFO("seed " << seed);
            check_close(out, normalise(im, opt.mean, opt.stddev));
            CHECK(fused.state() == reference.state());  // the same number of draws
        }
        CHECK(flips > 5);  // both branches were exercised
        CHECK(flips < 35);
        CHECK(shifted > 20);
    }
}

TEST_CASE("transform_image: each augmentation alone, and reproducibility", "[image]") {
    const Image src = random_image(12, 12, 3, 4);
    ImageTransformOptions opt;
    opt.height = 12;
    opt.width = 12;
    std::vector<float> plain(3 * 144), out(3 * 144), again(3 * 144);
    transform_image(src, opt, nullptr, plain.data());

    // hflip alone: the mirror of the plain sample, or the plain sample.
    opt.augment.hflip = true;
    bool saw_flip = false, saw_plain = false;
    for (uint64_t seed = 0; seed < 20; ++seed) {
        Rng rng(seed);
        transform_image(src, opt, &rng, out.data());
        if (out == plain) {
            saw_plain = true;
        } else {
            check_close(out, normalise(mirror(src), {}, {}));
            saw_flip = true;
        }
    }
    CHECK(saw_flip);
    CHECK(saw_plain);

    // Padding alone: a shifted copy with zeros coming in; offsets cover 0..2P on both axes.
    opt.augment.hflip = false;
    opt.augment.random_crop_padding = 2;
    std::vector<int> tops(5, 0), lefts(5, 0);
    for (uint64_t seed = 0; seed < 100; ++seed) {
        Rng rng(seed), reference(seed);
        transform_image(src, opt, &rng, out.data());
        const int top = static_cast<int>(reference.below(5)), left = static_cast<int>(reference.below(5));
        ++tops[top];
        ++lefts[left];
        check_close(out, normalise(pad_crop(src, 2, top, left), {}, {}));
    }
    for (int i = 0; i < 5; ++i) {
        CHECK(tops[i] > 0);
        CHECK(lefts[i] > 0);
    }

    // The same seed gives the same sample.
    opt.augment.hflip = true;
    opt.augment.resized_crop_min_scale = 0.3f;
    opt.augment.resized_crop_max_scale = 1.0f;
    Rng a(99), b(99);
    transform_image(src, opt, &a, out.data());
    transform_image(src, opt, &b, again.data());
    CHECK(out == again);
}

TEST_CASE("transform_image: a padding wider than the image shows padding, and writes only the sample", "[image]") {
    // random_crop_padding up to 4096 is valid; an 8x8 sample shifted by up to 40 may show nothing of the image. The
    // sample sits between guard floats that must stay as they were (a shift past the width once wrote outside it).
    for (int channels : {1, 3}) {
        const Image src = random_image(8, 8, channels, 7);
        ImageTransformOptions opt;
        opt.height = opt.width = 8;
        opt.channels = channels;
        opt.augment.random_crop_padding = 40;
        opt.augment.hflip = true;
        const size_t n = static_cast<size_t>(channels) * 64, guard = 64;
        int empty = 0;
        for (uint64_t seed = 0; seed < 200; ++seed) {
            std::vector<float> buf(n + 2 * guard, 12345.0f);
            Rng rng(seed), reference(seed);
            transform_image(src, opt, &rng, buf.data() + guard);
            for (size_t i = 0; i < guard; ++i) {
                REQUIRE(buf[i] == 12345.0f);
                REQUIRE(buf[guard + n + i] == 12345.0f);
            }
            const int top = static_cast<int>(reference.below(81)), left = static_cast<int>(reference.below(81));
            Image want = pad_crop(src, 40, top, left);
            if (reference.uniform() < 0.5f) want = mirror(want);
            check_close(std::vector<float>(buf.begin() + guard, buf.begin() + guard + n), normalise(want, {}, {}));
            empty += (std::abs(top - 40) >= 8 || std::abs(left - 40) >= 8);
        }
        CHECK(empty > 100);  // most draws show padding alone
    }
}

TEST_CASE("transform_image: bad options are InputErrors", "[image]") {
    const Image src = random_image(4, 4, 3, 1);
    std::vector<float> out(3 * 16);
    ImageTransformOptions opt;
    opt.height = 4;
    opt.width = 4;
    opt.mean = {0.5f, 0.5f};
    CHECK_THROWS_AS(transform_image(src, opt, nullptr, out.data()), InputError);
    opt.mean.clear();
    opt.stddev = {1.0f, 0.0f, 1.0f};
    CHECK_THROWS_AS(transform_image(src, opt, nullptr, out.data()), InputError);
    opt.stddev.clear();
    opt.height = 0;
    CHECK_THROWS_AS(transform_image(src, opt, nullptr, out.data()), InputError);
    opt.height = 4;
    opt.channels = 1;  // the image has 3
    CHECK_THROWS_AS(transform_image(src, opt, nullptr, out.data()), Error);
}

namespace {

// A smooth colour picture (JPEG keeps it within a few levels, so decodes at different scales agree closely).
Image smooth_photo(int h, int w, int channels) {
    Image im{h, w, channels, std::vector<uint8_t>(static_cast<size_t>(h) * w * channels)};
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
            for (int c = 0; c < channels; ++c) {
                const double v = 128 + 60 * std::sin(6.0 * x / w + c) * std::cos(4.0 * y / h) + 40.0 * y / h;
                im.pixels[(static_cast<size_t>(y) * w + x) * channels + c] = static_cast<uint8_t>(std::lround(v));
            }
    return im;
}

// Mean |a - b| in 8-bit levels of two samples normalised with mean 0, std 1.
double mean_level_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double sum = 0;
    for (size_t i = 0; i < a.size(); ++i) sum += std::abs(a[i] - b[i]) * 255.0;
    return sum / static_cast<double>(a.size());
}

ImageTransformOptions crop_options(int h, int w, int channels) {
    ImageTransformOptions opt;
    opt.height = h;
    opt.width = w;
    opt.channels = channels;
    opt.augment.resized_crop_min_scale = 0.08f;
    opt.augment.resized_crop_max_scale = 1.0f;
    opt.augment.hflip = true;
    opt.augment.random_crop_padding = 2;
    return opt;
}

}  // namespace

TEST_CASE("decode_transform_image: the same draws and picture as decode_image + transform_image", "[image]") {
    for (int channels : {1, 3}) {
        const auto jpeg = encode_jpeg(smooth_photo(480, 640, 3), 95);
        const Image full = decode_image(jpeg, "p.jpg", channels);
        Image scratch;
        // Target 200x200: no crop box is >= 400 on both sides often enough to matter, most decode at full scale;
        // target 24x24: most decode at 1/4 or 1/8. Both stay within a few levels of the full-size decode.
        for (int size : {200, 24}) {
            const ImageTransformOptions opt = crop_options(size, size, channels);
            double worst = 0;
            for (uint64_t seed = 0; seed < 30; ++seed) {
                Rng a(seed), b(seed);
                std::vector<float> fused(static_cast<size_t>(channels) * size * size), reference(fused.size());
                decode_transform_image(jpeg, "p.jpg", opt, &a, scratch, fused.data());
                transform_image(full, opt, &b, reference.data());
                REQUIRE(a.state() == b.state());  // the same draws
                worst = std::max(worst, mean_level_diff(fused, reference));
            }
            INFO("channels " << channels << ", target " << size);
            CHECK(worst < 2.5);
        }
        // A grey JPEG through the region path, as grey or RGB.
        {
            const auto grey_jpeg = encode_jpeg(smooth_photo(240, 320, 1), 95);
            const Image grey_full = decode_image(grey_jpeg, "g.jpg", channels);
            const ImageTransformOptions g = crop_options(24, 24, channels);
            Rng a(5), b(5);
            std::vector<float> fused(static_cast<size_t>(channels) * 24 * 24), reference(fused.size());
            decode_transform_image(grey_jpeg, "g.jpg", g, &a, scratch, fused.data());
            transform_image(grey_full, g, &b, reference.data());
            CHECK(mean_level_diff(fused, reference) < 2.5);
        }
        // Evaluation: exactly decode_image at the DCT scale for the target, then transform_image.
        ImageTransformOptions eval = crop_options(60, 80, channels);
        std::vector<float> fused(static_cast<size_t>(channels) * 60 * 80), reference(fused.size());
        decode_transform_image(jpeg, "p.jpg", eval, nullptr, scratch, fused.data());
        transform_image(decode_image(jpeg, "p.jpg", channels, 60, 80), eval, nullptr, reference.data());
        CHECK(fused == reference);
    }
}

TEST_CASE("decode_transform_image: a crop decoded at full scale matches the full decode closely", "[image]") {
    // A noisy picture: any misplaced row or column of the region would show as a large difference.
    Image noisy{150, 170, 3, std::vector<uint8_t>(150 * 170 * 3)};
    Rng fill(3);
    for (auto& p : noisy.pixels) p = static_cast<uint8_t>(100 + fill.below(40));
    const auto jpeg = encode_jpeg(noisy, 98);
    const Image full = decode_image(jpeg, "n.jpg", 3);
    const ImageTransformOptions opt = crop_options(90, 90, 3);  // boxes < 180: always decoded at full scale
    Image scratch;
    for (uint64_t seed = 0; seed < 20; ++seed) {
        Rng a(seed), b(seed);
        std::vector<float> fused(3 * 90 * 90), reference(fused.size());
        decode_transform_image(jpeg, "n.jpg", opt, &a, scratch, fused.data());
        transform_image(full, opt, &b, reference.data());
        INFO("seed " << seed);
        CHECK(mean_level_diff(fused, reference) < 0.5);
    }
}

TEST_CASE("decode_transform_image: other formats, and bad JPEGs fail whatever the crop", "[image]") {
    const Image pic = random_image(40, 50, 3, 12);
    const auto png = encode_png(pic);
    const ImageTransformOptions opt = crop_options(16, 16, 3);
    Image scratch;
    std::vector<float> fused(3 * 256), reference(3 * 256);
    Rng a(4), b(4);
    decode_transform_image(png, "p.png", opt, &a, scratch, fused.data());
    transform_image(pic, opt, &b, reference.data());
    CHECK(fused == reference);

    // Truncated at 70%: the crop may lie in the decoded top part, but the file is read to its end.
    const auto jpeg = encode_jpeg(smooth_photo(400, 300, 3), 90);
    const std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + jpeg.size() * 7 / 10);
    for (uint64_t seed = 0; seed < 20; ++seed) {
        Rng rng(seed);
        CHECK_THROWS_WITH(decode_transform_image(cut, "dir/cut.jpg", opt, &rng, scratch, fused.data()),
                          Catch::Contains("dir/cut.jpg") && Catch::Contains("JPEG"));
    }
    // Without its end-of-image marker: read to the end too.
    const std::vector<uint8_t> no_eoi(jpeg.begin(), jpeg.end() - 2);
    for (uint64_t seed = 0; seed < 5; ++seed) {
        Rng rng(seed);
        CHECK_THROWS_WITH(decode_transform_image(no_eoi, "no_eoi.jpg", opt, &rng, scratch, fused.data()),
                          Catch::Contains("no_eoi.jpg"));
    }
    // Noise after a JPEG start marker fails in the header.
    std::vector<uint8_t> noise{0xFF, 0xD8, 0xFF};
    for (int i = 0; i < 500; ++i) noise.push_back(static_cast<uint8_t>(i * 73 + 11));
    {
        Rng r(3);
        CHECK_THROWS_AS(decode_transform_image(noise, "noise.jpg", opt, &r, scratch, fused.data()), ImageDecodeError);
    }
    // The per-thread decompressor is reusable after those errors: a good file gives the same sample as the whole
    // decode path at full scale would on the same draws.
    {
        const ImageTransformOptions big = crop_options(200, 200, 3);  // full-scale region decodes
        Rng x(8), y(8);
        std::vector<float> got(3 * 200 * 200), want(got.size());
        decode_transform_image(jpeg, "good.jpg", big, &x, scratch, got.data());
        transform_image(decode_image(jpeg, "good.jpg", 3), big, &y, want.data());
        CHECK(mean_level_diff(got, want) < 0.5);
    }
    Rng rng(1);
    CHECK_THROWS_AS(decode_transform_image({}, "zero.jpg", opt, &rng, scratch, fused.data()), ImageDecodeError);
    const std::vector<uint8_t> header_only(jpeg.begin(), jpeg.begin() + 30);
    CHECK_THROWS_AS(decode_transform_image(header_only, "h.jpg", opt, &rng, scratch, fused.data()), ImageDecodeError);
}

TEST_CASE("decode_transform_image: mutated JPEGs decode or fail with an ImageDecodeError", "[image]") {
    const auto seed = encode_jpeg(smooth_photo(64, 80, 3), 90);
    const ImageTransformOptions opt = crop_options(16, 16, 3);
    Image scratch;
    std::vector<float> out(3 * 16 * 16);
    Rng mutate(77);
    int decoded = 0, failed = 0;
    for (int trial = 0; trial < 300; ++trial) {
        std::vector<uint8_t> bytes = seed;
        for (int f = 0; f < 3; ++f) {
            const size_t limit = mutate.below(2) == 0 ? bytes.size() : std::min<size_t>(200, bytes.size());
            bytes[mutate.below(limit)] ^= static_cast<uint8_t>(1 + mutate.below(255));
        }
        if (mutate.below(4) == 0) bytes.resize(3 + mutate.below(bytes.size() - 3));
        Rng rng(static_cast<uint64_t>(trial));
        try {
            decode_transform_image(bytes, "fuzz.jpg", opt, &rng, scratch, out.data());
            ++decoded;
        } catch (const ImageDecodeError& e) {
            REQUIRE(std::string(e.what()).rfind("fuzz.jpg: ", 0) == 0);
            ++failed;
        }
    }
    CHECK(decoded > 0);
    CHECK(failed > 0);
}

namespace {

// A fixed region for decode_jpeg_region.
struct FixedRegion final : detail::JpegRegionChooser {
    detail::JpegRegion region;
    detail::JpegRegion choose(const detail::JpegHeader&) override { return region; }
};

// TurboJPEG reads TJ_RESTART and TJ_PROGRESSIVE when it compresses; set for one encode.
std::vector<uint8_t> encode_jpeg_with_env(const Image& im, const char* var, const char* value) {
    ::setenv(var, value, 1);
    auto bytes = encode_jpeg(im, 92);
    ::unsetenv(var);
    return bytes;
}

struct JpegVariant {
    std::string name;
    std::vector<uint8_t> bytes;
};

// The layouts the region decoder treats differently: interleaved MCUs of 2x2, 2x1 and 1x1 blocks, one grey
// component, restart markers every 3 MCUs (not a row's multiple), progressive (no column discard).
std::vector<JpegVariant> jpeg_variants(int h, int w) {
    Image noisy = smooth_photo(h, w, 3);
    Rng fill(9);
    for (auto& p : noisy.pixels) p = static_cast<uint8_t>(std::clamp<int>(p + static_cast<int>(fill.below(31)) - 15, 0, 255));
    Image grey = smooth_photo(h, w, 1);
    for (auto& p : grey.pixels) p = static_cast<uint8_t>(std::clamp<int>(p + static_cast<int>(fill.below(31)) - 15, 0, 255));
    return {{"4:2:0", encode_jpeg(noisy, 92, JpegSubsampling::S420)},
            {"4:2:2", encode_jpeg(noisy, 92, JpegSubsampling::S422)},
            {"4:4:4", encode_jpeg(noisy, 92, JpegSubsampling::S444)},
            {"grey", encode_jpeg(grey, 92)},
            {"restart every 3 MCUs", encode_jpeg_with_env(noisy, "TJ_RESTART", "3B")},
            {"progressive", encode_jpeg_with_env(noisy, "TJ_PROGRESSIVE", "1")}};
}

}  // namespace

TEST_CASE("decode_jpeg_region: the region's pixels are the full decode's at that scale, bit for bit, whatever the "
          "layout and extent", "[image][jpeg]") {
    const int H = 203, W = 317;  // not multiples of any MCU
    for (const JpegVariant& v : jpeg_variants(H, W)) {
        for (int channels : {1, 3}) {
            for (int denom : {1, 2, 4}) {
                const int sh = (H + denom - 1) / denom, sw = (W + denom - 1) / denom;
                FixedRegion whole;
                whole.region = {denom, 0, sh, 0, sw};
                Image full, part;
                int first = -1;
                REQUIRE(detail::decode_jpeg_region(v.bytes, "v.jpg", channels, whole, full, &first,
                                                   DecodeExtent::WholeFile));
                REQUIRE(first == 0);
                REQUIRE((full.height == sh && full.width == sw));
                Rng pick(static_cast<uint64_t>(denom * 10 + channels));
                for (int trial = 0; trial < 12; ++trial) {
                    FixedRegion chooser;
                    const int top = static_cast<int>(pick.below(static_cast<uint64_t>(sh - 1)));
                    const int left = static_cast<int>(pick.below(static_cast<uint64_t>(sw - 1)));
                    const int bottom = top + 1 + static_cast<int>(pick.below(static_cast<uint64_t>(sh - top)));
                    const int right = left + 1 + static_cast<int>(pick.below(static_cast<uint64_t>(sw - left)));
                    chooser.region = {denom, top, bottom, left, right};
                    for (DecodeExtent extent : {DecodeExtent::WholeFile, DecodeExtent::RegionRows}) {
                        INFO(v.name << ", channels " << channels << ", 1/" << denom << ", rows [" << top << ", "
                                    << bottom << "), columns [" << left << ", " << right << "), extent "
                                    << (extent == DecodeExtent::WholeFile ? "whole file" : "region rows"));
                        REQUIRE(detail::decode_jpeg_region(v.bytes, "v.jpg", channels, chooser, part, &first, extent));
                        REQUIRE(part.height == bottom - top);
                        REQUIRE((first <= left && first + part.width >= right && first + part.width <= sw));
                        // Bit for bit inside; the decoded columns' outermost ones (libjpeg's fancy chroma
                        // upsampling takes them as the picture's edge) within a few levels.
                        int inner_mismatches = 0, edge_worst = 0;
                        for (int y = 0; y < part.height; ++y)
                            for (int x = left; x < right; ++x)
                                for (int c = 0; c < channels; ++c) {
                                    const int d = std::abs(at(part, y, x - first, c) - at(full, top + y, x, c));
                                    const bool edge = (x == first && first > 0) || (x == first + part.width - 1 && x < sw - 1);
                                    if (edge)
                                        edge_worst = std::max(edge_worst, d);
                                    else
                                        inner_mismatches += d != 0;
                                }
                        CHECK(inner_mismatches == 0);
                        CHECK(edge_worst <= 8);
                    }
                }
            }
        }
    }
}

TEST_CASE("DecodeExtent::RegionRows stops after the crop's last row; WholeFile reads a truncated file to its "
          "damage", "[image][jpeg]") {
    const auto jpeg = encode_jpeg(smooth_photo(400, 300, 3), 90);
    const std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + jpeg.size() * 6 / 10);
    FixedRegion top_rows;
    top_rows.region = {1, 10, 60, 20, 200};  // well above the cut
    Image out;
    int first = 0;
    CHECK_THROWS_WITH(detail::decode_jpeg_region(cut, "cut.jpg", 3, top_rows, out, &first, DecodeExtent::WholeFile),
                      Catch::Contains("cut.jpg") && Catch::Contains("JPEG"));
    REQUIRE(detail::decode_jpeg_region(cut, "cut.jpg", 3, top_rows, out, &first, DecodeExtent::RegionRows));
    Image intact;
    REQUIRE(detail::decode_jpeg_region(jpeg, "a.jpg", 3, top_rows, intact, &first, DecodeExtent::WholeFile));
    CHECK(out.pixels == intact.pixels);
    // A region that reaches the damage fails either way.
    FixedRegion low_rows;
    low_rows.region = {1, 300, 380, 20, 200};
    CHECK_THROWS_AS(detail::decode_jpeg_region(cut, "cut.jpg", 3, low_rows, out, &first, DecodeExtent::RegionRows),
                    ImageDecodeError);

    // Through decode_transform_image: the same samples with either extent on intact bytes, and WholeFile (the
    // default, what a file's first read uses) fails on the cut file whatever the crop.
    const ImageTransformOptions opt = crop_options(32, 32, 3);
    std::vector<float> a(3 * 32 * 32), b(a.size());
    Image scratch;
    int region_rows_decoded = 0;
    for (uint64_t seed = 0; seed < 20; ++seed) {
        Rng ra(seed), rb(seed);
        decode_transform_image(jpeg, "a.jpg", opt, &ra, scratch, a.data());
        decode_transform_image(jpeg, "a.jpg", opt, &rb, scratch, b.data(), DecodeExtent::RegionRows);
        CHECK(a == b);
        Rng rc(seed), rd(seed);
        CHECK_THROWS_AS(decode_transform_image(cut, "cut.jpg", opt, &rc, scratch, a.data()), ImageDecodeError);
        try {
            decode_transform_image(cut, "cut.jpg", opt, &rd, scratch, a.data(), DecodeExtent::RegionRows);
            ++region_rows_decoded;  // the crop lies above the cut
        } catch (const ImageDecodeError&) {
        }
    }
    CHECK(region_rows_decoded > 0);
}

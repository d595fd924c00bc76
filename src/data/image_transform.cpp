// Resize, training augmentation and normalisation of decoded images. One separable resampler does all the pixel
// work: a vertical pass accumulates the source rows that an output row needs into one float line, a horizontal pass
// turns that line into one 8-bit output row, and a row sink puts the row where it belongs (an Image, or the
// cropped, padded, flipped and normalised CHW floats of a training sample). Tap tables are built once per call;
// the per-thread scratch is reused so a worker allocates nothing per sample.
#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "image_transform_detail.hpp"
#include "ringtrain/data/image_transform.hpp"

namespace ringtrain::data {

namespace {

// For each output index along one axis: the first source index, and the weights of the consecutive source indices
// it reads (they sum to 1).
struct AxisTaps {
    std::vector<int> first;
    std::vector<int> offset;  // into weight; offset[i + 1] - offset[i] taps for output i
    std::vector<float> weight;

    void build(int src_len, int dst_len) {
        first.resize(dst_len);
        offset.resize(dst_len + 1);
        weight.clear();
        offset[0] = 0;
        const double scale = static_cast<double>(src_len) / dst_len;
        for (int i = 0; i < dst_len; ++i) {
            if (src_len == dst_len) {
                first[i] = i;
                weight.push_back(1.0f);
            } else if (src_len > dst_len) {
                // Area: output i covers source [i * scale, (i + 1) * scale); each source pixel weighs its overlap.
                const double lo = i * scale, hi = std::min<double>((i + 1) * scale, src_len);
                const int j0 = static_cast<int>(std::floor(lo));
                const int j1 = std::min(src_len, static_cast<int>(std::ceil(hi)));
                first[i] = j0;
                for (int j = j0; j < j1; ++j)
                    weight.push_back(static_cast<float>((std::min<double>(j + 1, hi) - std::max<double>(j, lo)) / scale));
            } else {
                // Bilinear with half-pixel centres, clamped at the borders.
                const double centre = std::clamp((i + 0.5) * scale - 0.5, 0.0, static_cast<double>(src_len - 1));
                const int j0 = static_cast<int>(centre);
                const float frac = static_cast<float>(centre - j0);
                first[i] = j0;
                weight.push_back(1.0f - frac);
                if (j0 + 1 < src_len) weight.push_back(frac);
            }
            offset[i + 1] = static_cast<int>(weight.size());
        }
        pad(src_len);
    }

    // The same taps with one count for every output (the largest), zero weights filling the rest, so the
    // horizontal pass runs a fixed-length, fully unrolled loop: output i reads `taps` source indices from start[i].
    int taps = 0;
    std::vector<int> start;
    std::vector<float> padded;  // dst_len * taps

private:
    void pad(int src_len) {
        const int n = static_cast<int>(first.size());
        taps = 0;
        for (int i = 0; i < n; ++i) taps = std::max(taps, offset[i + 1] - offset[i]);
        start.resize(n);
        padded.assign(static_cast<size_t>(n) * taps, 0.0f);
        for (int i = 0; i < n; ++i) {
            // Zeros after the taps, or before them where the row would run past the source's end.
            const int s0 = std::min(first[i], src_len - taps);
            start[i] = s0;
            for (int k = offset[i]; k < offset[i + 1]; ++k)
                padded[static_cast<size_t>(i) * taps + (first[i] - s0) + (k - offset[i])] = weight[k];
        }
    }
};

struct ResizeScratch {
    AxisTaps rows, cols;
    std::vector<float> line;       // the vertically resampled source row (box width * channels, + 1 zero of slack)
    std::vector<uint8_t> out_row;  // one output row (width * channels, + 1 byte of slack)
};

// Rounded, clamped in integers (branch-free cmov; float clamps compiled to compares and jumps here). The weights sum
// to 1, so v is within a rounding error of [0, 255] and the clamp only guards against that error.
inline uint8_t to_u8(float v) {
    const int i = static_cast<int>(v + 0.5f);
    return static_cast<uint8_t>(i < 0 ? 0 : (i > 255 ? 255 : i));
}

// One output row from the vertically resampled line: T taps (compile-time, unrolled; 0 = taps.taps at run time).
template <int C, int T>
void horizontal_pass(const float* line, const AxisTaps& taps, int width, uint8_t* out_row) {
    const int t_count = T > 0 ? T : taps.taps;
    const float* w = taps.padded.data();
    const int* start = taps.start.data();
    for (int ox = 0; ox < width; ++ox, w += t_count) {
        const float* px = line + static_cast<size_t>(start[ox]) * C;
        float acc[C];
        for (int c = 0; c < C; ++c) acc[c] = w[0] * px[c];
        for (int k = 1; k < t_count; ++k)
            for (int c = 0; c < C; ++c) acc[c] += w[k] * px[k * C + c];
        for (int c = 0; c < C; ++c) out_row[ox * C + c] = to_u8(acc[c]);
    }
}

#if defined(__SSE2__)
// RGB: one output pixel's three channels in one 4-float vector (the fourth lane, the next pixel's red, is computed
// and dropped), so a tap is one load and one multiply-add for all channels, and rounding and clamping (packs with
// saturation) one step for the pixel: about a third of the scalar loop's instructions (profiled: the horizontal
// pass was the largest of our costs after libjpeg). Reads one float past the last pixel and writes one byte past
// the row: the scratch buffers have that slack. Rounds as to_u8.
template <int T>
void horizontal_pass_rgb(const float* line, const AxisTaps& taps, int width, uint8_t* out_row) {
    const int t_count = T > 0 ? T : taps.taps;
    const float* w = taps.padded.data();
    const int* start = taps.start.data();
    const __m128 half = _mm_set1_ps(0.5f);
    for (int ox = 0; ox < width; ++ox, w += t_count) {
        const float* px = line + static_cast<size_t>(start[ox]) * 3;
        __m128 acc = _mm_mul_ps(_mm_set1_ps(w[0]), _mm_loadu_ps(px));
        for (int k = 1; k < t_count; ++k) {
#if defined(__FMA__)
            acc = _mm_fmadd_ps(_mm_set1_ps(w[k]), _mm_loadu_ps(px + 3 * k), acc);
#else
            acc = _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(w[k]), _mm_loadu_ps(px + 3 * k)));
#endif
        }
        __m128i v = _mm_cvttps_epi32(_mm_add_ps(acc, half));
        v = _mm_packus_epi16(_mm_packs_epi32(v, v), v);
        const int32_t rgbx = _mm_cvtsi128_si32(v);
        std::memcpy(out_row + static_cast<size_t>(ox) * 3, &rgbx, 4);
    }
}
#endif

template <int C>
void horizontal_pass_any(const float* line, const AxisTaps& taps, int width, uint8_t* out_row) {
#if defined(__SSE2__)
    if constexpr (C == 3) {
        switch (taps.taps) {
            case 1: horizontal_pass_rgb<1>(line, taps, width, out_row); break;
            case 2: horizontal_pass_rgb<2>(line, taps, width, out_row); break;
            case 3: horizontal_pass_rgb<3>(line, taps, width, out_row); break;
            case 4: horizontal_pass_rgb<4>(line, taps, width, out_row); break;
            default: horizontal_pass_rgb<0>(line, taps, width, out_row); break;
        }
        return;
    }
#endif
    switch (taps.taps) {
        case 1: horizontal_pass<C, 1>(line, taps, width, out_row); break;
        case 2: horizontal_pass<C, 2>(line, taps, width, out_row); break;
        case 3: horizontal_pass<C, 3>(line, taps, width, out_row); break;
        case 4: horizontal_pass<C, 4>(line, taps, width, out_row); break;
        default: horizontal_pass<C, 0>(line, taps, width, out_row); break;
    }
}

// Resamples the `box` of src to height x width, calling sink(row_index, const uint8_t* row) for each output row in
// order. C (1 or 3) is a template parameter so the per-pixel loops unroll.
template <int C, class Sink>
void resample(const Image& src, const CropBox& box, int height, int width, ResizeScratch& s, Sink&& sink) {
    s.rows.build(box.height, height);
    s.cols.build(box.width, width);
    const size_t line_len = static_cast<size_t>(box.width) * C;
    s.line.resize(line_len + 1);
    s.line[line_len] = 0.0f;
    s.out_row.resize(static_cast<size_t>(width) * C + 1);
    const size_t src_stride = static_cast<size_t>(src.width) * C;
    const uint8_t* origin = src.pixels.data() + static_cast<size_t>(box.top) * src_stride + static_cast<size_t>(box.left) * C;
    float* line = s.line.data();
    uint8_t* out_row = s.out_row.data();
    for (int oy = 0; oy < height; ++oy) {
        const int t0 = s.rows.offset[oy], t1 = s.rows.offset[oy + 1];
        const uint8_t* row = origin + static_cast<size_t>(s.rows.first[oy]) * src_stride;
        {
            const float w = s.rows.weight[t0];
            for (size_t i = 0; i < line_len; ++i) line[i] = w * row[i];
        }
        for (int t = t0 + 1; t < t1; ++t) {
            row += src_stride;
            const float w = s.rows.weight[t];
            for (size_t i = 0; i < line_len; ++i) line[i] += w * row[i];
        }
        horizontal_pass_any<C>(line, s.cols, width, out_row);
        sink(oy, static_cast<const uint8_t*>(out_row));
    }
}

template <class Sink>
void resample_any(const Image& src, const CropBox& box, int height, int width, ResizeScratch& s, Sink&& sink) {
    if (src.channels == 3)
        resample<3>(src, box, height, width, s, sink);
    else
        resample<1>(src, box, height, width, s, sink);
}

void check_image(const Image& image, const char* what) {
    check(image.channels == 1 || image.channels == 3, std::string(what) + ": images have 1 or 3 channels");
    check(image.height > 0 && image.width > 0 &&
              image.pixels.size() == static_cast<size_t>(image.height) * image.width * image.channels,
          std::string(what) + ": the pixel buffer does not match the image size");
}

}  // namespace

Image resize_image(const Image& src, int height, int width) {
    check_image(src, "resize_image");
    check(height > 0 && width > 0, "resize_image: the target size must be positive");
    Image out{height, width, src.channels, std::vector<uint8_t>(static_cast<size_t>(height) * width * src.channels)};
    ResizeScratch scratch;
    const size_t row_bytes = static_cast<size_t>(width) * src.channels;
    resample_any(src, CropBox{0, 0, src.height, src.width}, height, width, scratch,
                 [&](int y, const uint8_t* row) { std::copy(row, row + row_bytes, out.pixels.data() + y * row_bytes); });
    return out;
}

CropBox random_resized_crop_box(int height, int width, float min_scale, float max_scale, Rng& rng) {
    if (!(min_scale > 0 && min_scale <= max_scale))
        throw InputError("random_resized_crop: the scale range must satisfy 0 < min <= max (got [" +
                         std::to_string(min_scale) + ", " + std::to_string(max_scale) + "])");
    check(height > 0 && width > 0, "random_resized_crop: empty image");
    const double area = static_cast<double>(height) * width;
    const float log_lo = std::log(3.0f / 4.0f), log_hi = std::log(4.0f / 3.0f);
    for (int attempt = 0; attempt < 10; ++attempt) {
        const double target = area * rng.uniform(min_scale, max_scale);
        const double ratio = std::exp(static_cast<double>(rng.uniform(log_lo, log_hi)));
        // nearbyint rounds half to even, as Python's round() in torchvision.
        const int w = static_cast<int>(std::nearbyint(std::sqrt(target * ratio)));
        const int h = static_cast<int>(std::nearbyint(std::sqrt(target / ratio)));
        if (w > 0 && w <= width && h > 0 && h <= height) {
            const int top = static_cast<int>(rng.below(static_cast<uint64_t>(height - h + 1)));
            const int left = static_cast<int>(rng.below(static_cast<uint64_t>(width - w + 1)));
            return {top, left, h, w};
        }
    }
    const double in_ratio = static_cast<double>(width) / height;
    int w = width, h = height;
    if (in_ratio < 3.0 / 4.0)
        h = static_cast<int>(std::nearbyint(w / (3.0 / 4.0)));
    else if (in_ratio > 4.0 / 3.0)
        w = static_cast<int>(std::nearbyint(h * (4.0 / 3.0)));
    h = std::clamp(h, 1, height);
    w = std::clamp(w, 1, width);
    return {(height - h) / 2, (width - w) / 2, h, w};
}

namespace {

// (v / 255 - mean) / sd as one multiply-add, v * scale + shift: the table and the vector rows below compute it with
// the same instruction, so they give the same float for every level.
struct LevelMap {
    float scale = 1.0f / 255.0f;
    float shift = 0.0f;
};

LevelMap level_map(const ImageTransformOptions& options, int c) {
    const double mean = options.mean.empty() ? 0.0 : options.mean.at(static_cast<size_t>(c));
    const double sd = options.stddev.empty() ? 1.0 : options.stddev.at(static_cast<size_t>(c));
    return {static_cast<float>(1.0 / (255.0 * sd)), static_cast<float>(-mean / sd)};
}

inline float map_level(const LevelMap& m, float v) {
#if defined(__FMA__)
    return std::fma(v, m.scale, m.shift);
#else
    return v * m.scale + m.shift;
#endif
}

#if defined(__AVX2__)
// Output columns [x, x1) of one resized RGB row `p` (interleaved 8-bit, starting at column x) into the three
// normalised planes, 8 pixels a step: three byte shuffles take the 24 bytes apart into R, G and B, each widened to 8
// floats and mapped with one multiply-add. Flipped, output column x goes to W - 1 - x. Returns the first column not
// done (fewer than 8 left); reads only the 24 bytes of each 8 pixels. The per-pixel table loop this replaces was ~80 %
// of transform_box's time (bench/RESULTS.md, "Normalising a row 8 pixels at a time").
int normalise_rgb_row(const uint8_t* p, int x, int x1, int W, bool flip, float* const dst[3], const LevelMap maps[3]) {
    const __m128i lo_mask[3] = {_mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                                _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                                _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)};
    const __m128i hi_mask[3] = {_mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, -1, -1, -1, -1, -1, -1, -1, -1),
                                _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, -1, -1, -1, -1, -1, -1, -1, -1),
                                _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, -1, -1, -1, -1, -1, -1, -1, -1)};
    const __m256i reverse = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    __m256 scale[3], shift[3];
    for (int c = 0; c < 3; ++c) {
        scale[c] = _mm256_set1_ps(maps[c].scale);
        shift[c] = _mm256_set1_ps(maps[c].shift);
    }
    for (; x + 8 <= x1; x += 8, p += 24) {
        const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        const __m128i hi = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 16));
        for (int c = 0; c < 3; ++c) {
            const __m128i bytes = _mm_or_si128(_mm_shuffle_epi8(lo, lo_mask[c]), _mm_shuffle_epi8(hi, hi_mask[c]));
            const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
#if defined(__FMA__)
            const __m256 y = _mm256_fmadd_ps(v, scale[c], shift[c]);
#else
            const __m256 y = _mm256_add_ps(_mm256_mul_ps(v, scale[c]), shift[c]);
#endif
            if (!flip)
                _mm256_storeu_ps(dst[c] + x, y);
            else
                _mm256_storeu_ps(dst[c] + (W - 8 - x), _mm256_permutevar8x32_ps(y, reverse));
        }
    }
    return x;
}
#endif

}  // namespace

NormalisationTable normalisation_table(const ImageTransformOptions& options) {
    NormalisationTable lut{};
    for (int c = 0; c < std::min(options.channels, 3); ++c) {
        const LevelMap m = level_map(options, c);
        for (int v = 0; v < 256; ++v) lut[c][v] = map_level(m, static_cast<float>(v));
    }
    return lut;
}

void detail::check_transform_options(const ImageTransformOptions& options) {
    const int C = options.channels;
    if (C != 1 && C != 3) throw InputError("image transform: channels must be 1 or 3 (data.channels)");
    if (options.height <= 0 || options.width <= 0)
        throw InputError("image transform: the image size must be positive (data.image_size)");
    if ((!options.mean.empty() && static_cast<int>(options.mean.size()) != C) ||
        (!options.stddev.empty() && static_cast<int>(options.stddev.size()) != C))
        throw InputError("image transform: data.mean and data.std need one value per channel (" + std::to_string(C) + ")");
    for (float sd : options.stddev)
        if (!(sd > 0) && !(sd < 0)) throw InputError("image transform: data.std must not be zero");
    if (options.augment.random_crop_padding < 0) throw InputError("image transform: random_crop_padding must be >= 0");
}

void transform_image(const Image& image, const ImageTransformOptions& options, Rng* rng, float* out) {
    detail::check_transform_options(options);
    CropBox box{0, 0, image.height, image.width};
    if (rng && options.augment.resized_crop_min_scale > 0)
        box = random_resized_crop_box(image.height, image.width, options.augment.resized_crop_min_scale,
                                      options.augment.resized_crop_max_scale, *rng);
    detail::transform_box(image, box, options, rng, out);
}

void detail::transform_box(const Image& image, const CropBox& box, const ImageTransformOptions& options, Rng* rng,
                           float* out) {
    check_image(image, "transform_image");
    check(box.top >= 0 && box.left >= 0 && box.height > 0 && box.width > 0 && box.top + box.height <= image.height &&
              box.left + box.width <= image.width,
          "transform_image: the crop box is outside the image");
    const int H = options.height, W = options.width, C = options.channels;
    check(image.channels == C, "transform_image: the image has " + std::to_string(image.channels) +
                                   " channels, the options " + std::to_string(C));
    const ImageAugment& aug = options.augment;

    // The draws after the crop box, in the documented order.
    int shift_y = 0, shift_x = 0;  // output (y, x) shows resized (y + shift_y, x + shift_x); outside = zero padding
    bool flip = false;
    if (rng) {
        if (const int p = aug.random_crop_padding; p > 0) {
            shift_y = static_cast<int>(rng->below(static_cast<uint64_t>(2 * p + 1))) - p;
            shift_x = static_cast<int>(rng->below(static_cast<uint64_t>(2 * p + 1))) - p;
        }
        if (aug.hflip) flip = rng->uniform() < 0.5f;
    }

    const NormalisationTable lut = normalisation_table(options);
    LevelMap maps[3];
    for (int c = 0; c < std::min(C, 3); ++c) maps[c] = level_map(options, c);

    const size_t plane = static_cast<size_t>(H) * W;
    // Output columns [x0, x1) show resized columns x + shift_x; the rest is padding.
    // Clamped both ways: a padding larger than the image (the schema allows up to 4096) shifts it wholly out of view.
    const int x0 = std::clamp(-shift_x, 0, W), x1 = std::clamp(W - shift_x, x0, W);
    auto fill_padding_row = [&](int y) {
        for (int c = 0; c < C; ++c) std::fill_n(out + c * plane + static_cast<size_t>(y) * W, W, lut[c][0]);
    };
    for (int y = 0; y < H; ++y)
        if (y + shift_y < 0 || y + shift_y >= H) fill_padding_row(y);

    thread_local ResizeScratch scratch;
    resample_any(image, box, H, W, scratch, [&](int ry, const uint8_t* row) {
        const int y = ry - shift_y;
        if (y < 0 || y >= H) return;
        float* dst[3];
        for (int c = 0; c < C; ++c) dst[c] = out + c * plane + static_cast<size_t>(y) * W;
        // Output column x shows the unflipped column u = x (or W - 1 - x when flipped); columns outside [x0, x1)
        // are padding. One pass over the row writes all channel planes.
        const int shown0 = flip ? W - x1 : x0, shown1 = flip ? W - x0 : x1;  // output columns showing pixels
        for (int c = 0; c < C; ++c) {
            std::fill(dst[c], dst[c] + shown0, lut[c][0]);
            std::fill(dst[c] + shown1, dst[c] + W, lut[c][0]);
        }
        const uint8_t* p = row + static_cast<size_t>(x0 + shift_x) * C;
        int x = x0;
#if defined(__AVX2__)
        if (C == 3) {
            x = normalise_rgb_row(p, x0, x1, W, flip, dst, maps);
            p += static_cast<size_t>(x - x0) * 3;
        }
#endif
        if (!flip) {
            for (; x < x1; ++x, p += C)
                for (int c = 0; c < C; ++c) dst[c][x] = lut[c][p[c]];
        } else {
            for (; x < x1; ++x, p += C)
                for (int c = 0; c < C; ++c) dst[c][W - 1 - x] = lut[c][p[c]];
        }
    });
}

}  // namespace ringtrain::data

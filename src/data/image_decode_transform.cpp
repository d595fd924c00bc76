// decode_transform_image: one training or evaluation sample from the bytes of a file, choosing the cheapest decode
// that still gives the transform enough pixels (see the header).
#include <algorithm>
#include <cmath>

#include "image_codecs.hpp"
#include "image_transform_detail.hpp"
#include "ringtrain/data/image_transform.hpp"

namespace ringtrain::data {

namespace {

// round(v / denom) for v >= 0.
int scaled(int v, int denom) { return (v + denom / 2) / denom; }

}  // namespace

void decode_transform_image(std::span<const uint8_t> bytes, std::string_view name, const ImageTransformOptions& options,
                            Rng* rng, Image& scratch, float* out, DecodeExtent extent) {
    detail::check_transform_options(options);
    const int H = options.height, W = options.width, C = options.channels;
    const ImageAugment& aug = options.augment;
    const bool crop = rng != nullptr && aug.resized_crop_min_scale > 0;
    if (!crop || bytes.empty() || detail::sniff_image_type(bytes) != ImageType::Jpeg) {
        decode_image_into(bytes, name, C, crop ? 0 : H, crop ? 0 : W, scratch);
        transform_image(scratch, options, rng, out);
        return;
    }
    // The crop box is drawn once the header gives the full-resolution size; the region is that box at the smallest
    // DCT scale that keeps it >= the target size, rounded to the nearest scaled pixel.
    struct Chooser final : detail::JpegRegionChooser {
        const ImageTransformOptions& options;
        Rng& rng;
        CropBox box;
        detail::JpegRegion region;
        Chooser(const ImageTransformOptions& o, Rng& r) : options(o), rng(r) {}
        detail::JpegRegion choose(const detail::JpegHeader& header) override {
            box = random_resized_crop_box(header.height, header.width, options.augment.resized_crop_min_scale,
                                          options.augment.resized_crop_max_scale, rng);
            detail::JpegRegion r;
            for (int d : {2, 4, 8})
                if (box.height >= options.height * d && box.width >= options.width * d) r.denom = d;
            const int scaled_h = (header.height + r.denom - 1) / r.denom;
            const int scaled_w = (header.width + r.denom - 1) / r.denom;
            r.top = std::min(scaled(box.top, r.denom), scaled_h - 1);
            r.bottom = std::clamp(scaled(box.top + box.height, r.denom), r.top + 1, scaled_h);
            r.left = std::min(scaled(box.left, r.denom), scaled_w - 1);
            r.right = std::clamp(scaled(box.left + box.width, r.denom), r.left + 1, scaled_w);
            region = r;
            return r;
        }
    } chooser(options, *rng);
    int first_column = 0;
    // CMYK (rare): libjpeg cannot convert it by region; decode_jpeg converts the whole picture.
    if (!detail::decode_jpeg_region(bytes, name, C, chooser, scratch, &first_column, extent)) {
        decode_image_into(bytes, name, C, 0, 0, scratch);
        transform_image(scratch, options, rng, out);
        return;
    }
    const detail::JpegRegion& r = chooser.region;
    detail::transform_box(scratch, CropBox{0, r.left - first_column, r.bottom - r.top, r.right - r.left}, options, rng,
                          out);
}

}  // namespace ringtrain::data

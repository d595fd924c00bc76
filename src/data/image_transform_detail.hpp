// Internal to the image transforms: the steps of transform_image after the crop box is known, shared with
// decode_transform_image (which draws the box before decoding).
#pragma once

#include "ringtrain/data/image_transform.hpp"

namespace ringtrain::data::detail {

// InputError for options no transform can run with (size, channels, mean/std lengths, zero std, negative padding).
void check_transform_options(const ImageTransformOptions& options);

// Resizes `box` of image to the target size, then draws and applies pad-and-crop and hflip (when rng is given) and
// normalises into out; transform_image is random_resized_crop_box (or the whole image) + this.
void transform_box(const Image& image, const CropBox& box, const ImageTransformOptions& options, Rng* rng, float* out);

}  // namespace ringtrain::data::detail

// JPEG through libjpeg-turbo's TurboJPEG API. DCT scaling decodes a large photo straight to near the size the model
// wants (a 1/4-scale decode costs about a tenth of a full one); every libjpeg warning (truncated data, corrupt
// entropy segment) stops the decode and is an error, so a damaged file never trains as a half-grey picture.
#include <turbojpeg.h>

#include <memory>

#include "image_codecs.hpp"

namespace ringtrain::data {

namespace {

struct TjDestroy {
    void operator()(void* handle) const { tjDestroy(handle); }
};
using TjHandle = std::unique_ptr<void, TjDestroy>;

// One decompressor per thread, reused image after image (creating one allocates libjpeg's state, which costs about
// as much as decoding a 96x96 thumbnail). A handle that failed is replaced: TurboJPEG 2.1 leaves it unusable after
// some header errors (every later file then fails with the old message).
TjHandle& thread_handle() {
    thread_local TjHandle handle;
    return handle;
}

tjhandle thread_decompressor() {
    TjHandle& handle = thread_handle();
    if (!handle) handle.reset(tjInitDecompress());
    if (!handle) throw Error(std::string("libjpeg-turbo: cannot create a decompressor: ") + tjGetErrorStr2(nullptr));
    return handle.get();
}

std::string tj_error(tjhandle handle) { return tjGetErrorStr2(handle); }

// The error message of a failed call, and a fresh handle for the next file.
std::string failed(tjhandle handle) {
    std::string message = tj_error(handle);
    thread_handle().reset();
    return message;
}

// The JPEG DCT scale: the smallest of 1/2, 1/4, 1/8 that keeps both sides >= the minimums (when both are > 0).
tjscalingfactor jpeg_dct_scale(int height, int width, int min_height, int min_width) {
    // Only 1/2, 1/4 and 1/8: libjpeg-turbo runs those IDCTs in SIMD; the other M/8 use plain C and measured slower
    // than the full-size SIMD IDCT (a 96x96 JPEG decoded at 6/8 ran at 0.7x the speed of the full decode).
    tjscalingfactor scale{1, 1};
    if (min_height <= 0 || min_width <= 0) return scale;
    for (int denom : {2, 4, 8}) {
        const tjscalingfactor f{1, denom};
        if (TJSCALED(width, f) < min_width || TJSCALED(height, f) < min_height) break;
        scale = f;
    }
    return scale;
}

}  // namespace

namespace detail {

void decode_jpeg(std::span<const uint8_t> bytes, std::string_view name, int channels, int min_height,
                 int min_width, Image& out) {
    tjhandle tj = thread_decompressor();
    int width = 0, height = 0, subsamp = 0, colorspace = 0;
    if (tjDecompressHeader3(tj, bytes.data(), static_cast<unsigned long>(bytes.size()), &width, &height, &subsamp,
                            &colorspace) != 0)
        fail(name, "corrupt or truncated JPEG header (libjpeg-turbo: " + failed(tj) + ")");
    // TurboJPEG reads a file that ends before its frame header as "tables only" and reports 0x0.
    if (width == 0 || height == 0) fail(name, "corrupt or truncated JPEG header (no image frame before the data ends)");
    check_size(name, height, width);

    const tjscalingfactor scale = jpeg_dct_scale(height, width, min_height, min_width);
    const int out_w = TJSCALED(width, scale);
    const int out_h = TJSCALED(height, scale);

    // LIMITSCANS: a crafted progressive JPEG with thousands of scans would otherwise take minutes.
    const int flags = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;
    if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) {
        // libjpeg does not convert CMYK to RGB; Adobe writes inverted CMYK, so the inks multiply out as below.
        std::vector<uint8_t> cmyk(static_cast<size_t>(out_h) * out_w * 4);
        if (tjDecompress2(tj, bytes.data(), static_cast<unsigned long>(bytes.size()), cmyk.data(), out_w, 0, out_h,
                          TJPF_CMYK, flags) != 0)
            fail(name, "corrupt or truncated JPEG (libjpeg-turbo: " + failed(tj) + ")");
        reshape(out, out_h, out_w, channels);
        uint8_t* dst = out.pixels.data();
        for (size_t i = 0, n = static_cast<size_t>(out_h) * out_w; i < n; ++i) {
            const uint8_t* p = &cmyk[4 * i];
            const uint8_t r = static_cast<uint8_t>((p[0] * p[3] + 127) / 255);
            const uint8_t g = static_cast<uint8_t>((p[1] * p[3] + 127) / 255);
            const uint8_t b = static_cast<uint8_t>((p[2] * p[3] + 127) / 255);
            if (channels == 3) {
                dst[3 * i] = r;
                dst[3 * i + 1] = g;
                dst[3 * i + 2] = b;
            } else {
                dst[i] = luma601(r, g, b);
            }
        }
        return;
    }
    // Grey from a colour JPEG is its luma plane (Y, the ITU-R 601 weights), decoded without any colour conversion.
    reshape(out, out_h, out_w, channels);
    if (tjDecompress2(tj, bytes.data(), static_cast<unsigned long>(bytes.size()), out.pixels.data(), out_w, 0, out_h,
                      channels == 3 ? TJPF_RGB : TJPF_GRAY, flags) != 0)
        fail(name, "corrupt or truncated JPEG (libjpeg-turbo: " + failed(tj) + ")");
}

}  // namespace detail

std::vector<uint8_t> encode_jpeg(const Image& image, int quality, JpegSubsampling subsampling) {
    check(image.channels == 1 || image.channels == 3, "encode_jpeg: 1 or 3 channels");
    check(image.pixels.size() == static_cast<size_t>(image.height) * image.width * image.channels,
          "encode_jpeg: pixel buffer does not match the image size");
    TjHandle tj(tjInitCompress());
    if (!tj) throw Error(std::string("libjpeg-turbo: cannot create a compressor: ") + tjGetErrorStr2(nullptr));
    unsigned char* jpeg = nullptr;
    unsigned long size = 0;
    const int rc = tjCompress2(tj.get(), image.pixels.data(), image.width, 0, image.height,
                               image.channels == 3 ? TJPF_RGB : TJPF_GRAY, &jpeg, &size,
                               image.channels == 1                       ? TJSAMP_GRAY
                               : subsampling == JpegSubsampling::S444 ? TJSAMP_444
                               : subsampling == JpegSubsampling::S422 ? TJSAMP_422
                                                                      : TJSAMP_420,
                               quality, TJFLAG_ACCURATEDCT);
    std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(jpeg, [](unsigned char* p) { tjFree(p); });
    if (rc != 0) throw Error("encode_jpeg: " + tj_error(tj.get()));
    return std::vector<uint8_t>(jpeg, jpeg + size);
}

}  // namespace ringtrain::data

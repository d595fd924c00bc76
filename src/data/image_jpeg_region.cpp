// Decoding one region of a JPEG at a DCT scale, through the libjpeg API of libjpeg-turbo (TurboJPEG 2.1 has no
// partial decode): jpeg_crop_scanline keeps the IDCT and colour conversion to the region's columns and
// jpeg_skip_scanlines to its rows. With DecodeExtent::WholeFile the rows after the region are skipped to the last
// one, which is read, so the entropy decoder reads the whole file and a truncated or corrupt file fails here as it
// does in decode_jpeg; with RegionRows (bytes known to decode completely) the decode is aborted after the region.
//
// Inside the region's rows libjpeg entropy-decodes every MCU of the row (the bit stream is sequential) but runs the
// IDCT only for the MCU columns of the crop; the coefficients of the others are stored and dropped. For a sequential
// Huffman scan the decoder is wrapped so that those MCUs are decoded with no output block (libjpeg's own discard
// path, the one jpeg_skip_scanlines uses): the same bits are read and checked, the same pixels come out, about 40 %
// less work for those MCUs. This reaches into libjpeg's module interface (jpegint.h, installed by
// libjpeg62-turbo-dev): the entropy decoder's decode_mcu pointer and the crop's iMCU columns.
//
// libjpeg reports errors by longjmp. The stage functions that call setjmp hold only trivially destructible locals;
// the C++ owners (the decompressor, the output Image) live outside them.
#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdio>

// jpeglib.h needs size_t and FILE declared first; JPEG_INTERNALS also brings in jpegint.h (the module interfaces),
// whose helper macros are dropped after it.
#define JPEG_INTERNALS
#include <jpeglib.h>
#undef JPEG_INTERNALS
#undef MAX
#undef MIN
#undef LEFT_SHIFT
#undef RIGHT_SHIFT

#include "image_codecs.hpp"

namespace ringtrain::data {

namespace {

struct JpegContext {
    jpeg_decompress_struct cinfo;  // first: libjpeg's callbacks get &cinfo and find the context from it
    jpeg_error_mgr errors;
    jpeg_progress_mgr progress;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    // The column discard (decode_mcu_in_crop): libjpeg's decode_mcu, the column of the next MCU, and the crop.
    boolean (*decode_mcu)(j_decompress_ptr, JBLOCKROW*);
    JDIMENSION mcu_column, mcus_per_row, first_column, last_column;
};

JpegContext* context_of(j_common_ptr cinfo) { return reinterpret_cast<JpegContext*>(cinfo); }

// libjpeg's decode_mcu, with no output block for an MCU outside the crop's columns. MCUs come in raster order,
// MCUs_per_row a row (both in the rows read and in those jpeg_skip_scanlines discards), so a counter gives the
// column. A suspended decode (never with jpeg_mem_src) is retried for the same MCU, so the counter steps back.
boolean decode_mcu_in_crop(j_decompress_ptr cinfo, JBLOCKROW* blocks) {
    JpegContext* ctx = context_of(reinterpret_cast<j_common_ptr>(cinfo));
    const JDIMENSION column = ctx->mcu_column;
    const bool inside = column >= ctx->first_column && column <= ctx->last_column;
    const boolean done = ctx->decode_mcu(cinfo, inside ? blocks : nullptr);
    if (done) ctx->mcu_column = column + 1 == ctx->mcus_per_row ? 0 : column + 1;
    return done;
}

// Installs decode_mcu_in_crop when the crop leaves MCU columns out and an MCU column is an iMCU column (so the crop's
// columns, kept in iMCU units, are MCU columns): a single sequential Huffman scan, interleaved (an MCU holds every
// component) or of one component without subsampling. Otherwise libjpeg decodes as it does by itself.
void discard_columns_outside_crop(JpegContext* ctx) {
    j_decompress_ptr d = &ctx->cinfo;
    const bool one_sequential_huffman_scan = !d->progressive_mode && !d->arith_code &&
                                             !d->inputctl->has_multiple_scans && d->comps_in_scan == d->num_components;
    const bool mcu_is_imcu = d->comps_in_scan > 1 || (d->max_h_samp_factor == 1 && d->max_v_samp_factor == 1);
    const JDIMENSION first = d->master->first_iMCU_col, last = d->master->last_iMCU_col;
    if (!one_sequential_huffman_scan || !mcu_is_imcu || (first == 0 && last + 1 >= d->MCUs_per_row)) return;
    ctx->decode_mcu = d->entropy->decode_mcu;
    ctx->mcu_column = 0;
    ctx->mcus_per_row = d->MCUs_per_row;
    ctx->first_column = first;
    ctx->last_column = last;
    d->entropy->decode_mcu = decode_mcu_in_crop;
}

void on_error_exit(j_common_ptr cinfo) {
    JpegContext* ctx = context_of(cinfo);
    (*cinfo->err->format_message)(cinfo, ctx->message);
    std::longjmp(ctx->jump, 1);
}

// Warnings (level -1: truncated data, corrupt entropy segments) are errors, as TJFLAG_STOPONWARNING in decode_jpeg;
// trace messages (level >= 0) are ignored.
void on_emit_message(j_common_ptr cinfo, int level) {
    if (level < 0) on_error_exit(cinfo);
}

// At most 500 progressive scans, as TJFLAG_LIMITSCANS: a crafted file with thousands would take minutes.
void on_progress(j_common_ptr cinfo) {
    auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
    if (d->progressive_mode && d->input_scan_number > 500) {
        JpegContext* ctx = context_of(cinfo);
        std::snprintf(ctx->message, sizeof ctx->message, "more than 500 progressive scans");
        std::longjmp(ctx->jump, 1);
    }
}

bool create_stage(JpegContext* ctx) {
    if (setjmp(ctx->jump)) return false;
    jpeg_create_decompress(&ctx->cinfo);
    ctx->cinfo.progress = &ctx->progress;
    return true;
}

bool read_header_stage(JpegContext* ctx, const uint8_t* data, size_t size) {
    if (setjmp(ctx->jump)) return false;
    jpeg_mem_src(&ctx->cinfo, data, static_cast<unsigned long>(size));
    jpeg_read_header(&ctx->cinfo, TRUE);
    return true;
}

// Starts the decompressor at 1/denom and narrows it to the columns [*left, *left + *width) (widened by libjpeg).
bool start_stage(JpegContext* ctx, int denom, int channels, JDIMENSION* left, JDIMENSION* width) {
    if (setjmp(ctx->jump)) return false;
    ctx->cinfo.scale_num = 1;
    ctx->cinfo.scale_denom = static_cast<unsigned>(denom);
    ctx->cinfo.out_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_start_decompress(&ctx->cinfo);
    jpeg_crop_scanline(&ctx->cinfo, left, width);
    discard_columns_outside_crop(ctx);  // no MCU is decoded before the first read or skip
    return true;
}

// Reads rows [top, bottom) to pixels; with whole_file, then the picture's last row to the spare row after them
// (skipping to the very end would mark the input done without reading it), then the end of the file.
bool read_rows_stage(JpegContext* ctx, JDIMENSION top, JDIMENSION bottom, uint8_t* pixels, size_t stride,
                     bool whole_file) {
    if (setjmp(ctx->jump)) return false;
    j_decompress_ptr d = &ctx->cinfo;
    if (top > 0) jpeg_skip_scanlines(d, top);
    // Several rows a call (libjpeg produces up to rec_outbuf_height at once; one a call costs a copy more).
    JSAMPROW rows[16];
    while (d->output_scanline < bottom) {
        const JDIMENSION n = std::min<JDIMENSION>(16, bottom - d->output_scanline);
        for (JDIMENSION i = 0; i < n; ++i) rows[i] = pixels + static_cast<size_t>(d->output_scanline - top + i) * stride;
        jpeg_read_scanlines(d, rows, n);
    }
    if (!whole_file) return true;  // the caller aborts the decompression
    if (d->output_scanline < d->output_height) {
        if (d->output_scanline + 1 < d->output_height) jpeg_skip_scanlines(d, d->output_height - 1 - d->output_scanline);
        JSAMPROW row = pixels + static_cast<size_t>(bottom - top) * stride;
        jpeg_read_scanlines(d, &row, 1);
    }
    jpeg_finish_decompress(d);
    return true;
}

// One decompressor per thread, reused file after file (creating one costs about as much as decoding a thumbnail).
// jpeg_abort_decompress after every use returns it to the state of a new one.
class ThreadDecompressor {
public:
    ThreadDecompressor() {
        ctx_.cinfo.err = jpeg_std_error(&ctx_.errors);
        ctx_.errors.error_exit = on_error_exit;
        ctx_.errors.emit_message = on_emit_message;
        ctx_.progress.progress_monitor = on_progress;
        if (!create_stage(&ctx_)) throw Error(std::string("libjpeg: cannot create a decompressor: ") + ctx_.message);
    }
    ~ThreadDecompressor() { jpeg_destroy_decompress(&ctx_.cinfo); }
    ThreadDecompressor(const ThreadDecompressor&) = delete;
    ThreadDecompressor& operator=(const ThreadDecompressor&) = delete;
    JpegContext* context() { return &ctx_; }

private:
    JpegContext ctx_{};
};

// Aborts the decompression when leaving the scope, however it is left (error or not).
struct AbortOnExit {
    JpegContext* ctx;
    ~AbortOnExit() { jpeg_abort_decompress(&ctx->cinfo); }
};

}  // namespace

namespace detail {

bool decode_jpeg_region(std::span<const uint8_t> bytes, std::string_view name, int channels,
                        JpegRegionChooser& chooser, Image& out, int* first_column, DecodeExtent extent) {
    check(channels == 1 || channels == 3, "decode_jpeg_region: 1 or 3 channels");
    thread_local ThreadDecompressor decompressor;
    JpegContext* ctx = decompressor.context();
    AbortOnExit abort_on_exit{ctx};
    if (!read_header_stage(ctx, bytes.data(), bytes.size()))
        fail(name, std::string("corrupt or truncated JPEG header (libjpeg: ") + ctx->message + ")");
    const JpegHeader header{static_cast<int>(ctx->cinfo.image_height), static_cast<int>(ctx->cinfo.image_width)};
    check_size(name, header.height, header.width);
    if (ctx->cinfo.jpeg_color_space == JCS_CMYK || ctx->cinfo.jpeg_color_space == JCS_YCCK) return false;

    const JpegRegion r = chooser.choose(header);
    check(r.denom == 1 || r.denom == 2 || r.denom == 4 || r.denom == 8, "decode_jpeg_region: scale 1/1, 1/2, 1/4 or 1/8");
    const int scaled_h = (header.height + r.denom - 1) / r.denom, scaled_w = (header.width + r.denom - 1) / r.denom;
    check(0 <= r.top && r.top < r.bottom && r.bottom <= scaled_h && 0 <= r.left && r.left < r.right &&
              r.right <= scaled_w,
          "decode_jpeg_region: the region is outside the scaled picture");
    JDIMENSION x = static_cast<JDIMENSION>(r.left), w = static_cast<JDIMENSION>(r.right - r.left);
    if (!start_stage(ctx, r.denom, channels, &x, &w))
        fail(name, std::string("corrupt or truncated JPEG (libjpeg: ") + ctx->message + ")");
    reshape(out, r.bottom - r.top + 1, static_cast<int>(w), channels);  // + the spare row for the last row
    *first_column = static_cast<int>(x);
    if (!read_rows_stage(ctx, static_cast<JDIMENSION>(r.top), static_cast<JDIMENSION>(r.bottom), out.pixels.data(),
                         static_cast<size_t>(w) * channels, extent == DecodeExtent::WholeFile))
        fail(name, std::string("corrupt or truncated JPEG (libjpeg: ") + ctx->message + ")");
    reshape(out, r.bottom - r.top, static_cast<int>(w), channels);
    return true;
}

}  // namespace detail

}  // namespace ringtrain::data

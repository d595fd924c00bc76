// fp16 / bf16 conversions: F16C when the target has it, the portable bit manipulation otherwise.
#include "ringtrain/comm/half.hpp"

#include <algorithm>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace ringtrain::comm {

const char* wire_format_name(WireFormat w) {
    switch (w) {
        case WireFormat::Float32: return "fp32";
        case WireFormat::Float16: return "fp16";
        case WireFormat::BFloat16: return "bf16";
    }
    return "?";
}

#if defined(__F16C__)
uint16_t float_to_half(float f) {
    return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
float half_to_float(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }

void floats_to_half(const float* src, uint16_t* dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
    }
    for (; i < n; ++i) dst[i] = float_to_half(src[i]);
}
void half_to_floats(const uint16_t* src, float* dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    for (; i < n; ++i) dst[i] = half_to_float(src[i]);
}
#else
uint16_t float_to_half(float f) { return detail::float_to_half_portable(f); }
float half_to_float(uint16_t h) { return detail::half_to_float_portable(h); }
void floats_to_half(const float* src, uint16_t* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = detail::float_to_half_portable(src[i]);
}
void half_to_floats(const uint16_t* src, float* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = detail::half_to_float_portable(src[i]);
}
#endif

void floats_to_bfloat16(const float* __restrict src, uint16_t* __restrict dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = float_to_bfloat16(src[i]);
}
void bfloat16_to_floats(const uint16_t* __restrict src, float* __restrict dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = bfloat16_to_float(src[i]);
}

void encode16(WireFormat w, const float* src, uint16_t* dst, size_t n) {
    switch (w) {
        case WireFormat::Float16: floats_to_half(src, dst, n); return;
        case WireFormat::BFloat16: floats_to_bfloat16(src, dst, n); return;
        case WireFormat::Float32: break;
    }
    throw Error("encode16: Float32 is not a 16-bit wire format");
}

void decode16(WireFormat w, const uint16_t* src, float* dst, size_t n) {
    switch (w) {
        case WireFormat::Float16: half_to_floats(src, dst, n); return;
        case WireFormat::BFloat16: bfloat16_to_floats(src, dst, n); return;
        case WireFormat::Float32: break;
    }
    throw Error("decode16: Float32 is not a 16-bit wire format");
}

namespace {

// Decodes in blocks that stay in L1, then combines with plain vectorisable loops.
template <class Combine>
void decode_combine(WireFormat w, const uint16_t* src, float* __restrict dst, size_t n, Combine combine) {
    constexpr size_t kBlock = 1024;
    alignas(64) float tmp[kBlock];
    for (size_t off = 0; off < n; off += kBlock) {
        const size_t len = std::min(kBlock, n - off);
        decode16(w, src + off, tmp, len);
        float* __restrict d = dst + off;
        for (size_t i = 0; i < len; ++i) d[i] = combine(d[i], tmp[i]);
    }
}

}  // namespace

void decode16_reduce(WireFormat w, const uint16_t* src, float* dst, size_t n, ReduceOp op) {
    switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Average: decode_combine(w, src, dst, n, [](float a, float b) { return a + b; }); return;
        case ReduceOp::Max: decode_combine(w, src, dst, n, [](float a, float b) { return a > b ? a : b; }); return;
        case ReduceOp::Min: decode_combine(w, src, dst, n, [](float a, float b) { return a < b ? a : b; }); return;
    }
}

void round_to_16(WireFormat w, float* data, uint16_t* tmp, size_t n) {
    encode16(w, data, tmp, n);
    decode16(w, tmp, data, n);
}

}  // namespace ringtrain::comm

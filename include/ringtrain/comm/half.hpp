// 16-bit floating-point formats for gradient compression on the wire: IEEE binary16 ("fp16") and bfloat16 ("bf16").
//
// Conversions float -> 16 bits round to nearest, ties to even; overflow gives ±inf (fp16: |x| >= 65520; bf16: past
// the largest finite bf16), NaN stays NaN (quiet, sign and the top payload bits kept), fp16 subnormals are produced
// and read exactly. Conversions 16 bits -> float are exact (every fp16 and bf16 value is a float).
//
// The scalar and bulk functions use F16C instructions when the compiler targets them (__F16C__, e.g. -march=native on
// any x86 since Ivy Bridge) and a portable bit-manipulation fallback otherwise; both give bitwise the same results
// (the tests compare them on all 65536 fp16 patterns and on every tie/overflow/subnormal boundary). The portable
// versions are exposed in `detail` for those tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ringtrain::comm {

// How a float allreduce puts its values on the wire. Float32 = exact floats; the 16-bit formats halve the traffic:
// values are converted to 16 bits for every transfer and summed in float32 on arrival.
enum class WireFormat { Float32, Float16, BFloat16 };

// "fp32", "fp16", "bf16".
const char* wire_format_name(WireFormat w);
// Bytes per element on the wire (4 or 2).
inline size_t wire_element_size(WireFormat w) { return w == WireFormat::Float32 ? 4 : 2; }

namespace detail {

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}
inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// Portable binary16 <-> float (same results as F16C's vcvtps2ph with round-to-nearest-even and vcvtph2ps).
inline uint16_t float_to_half_portable(float f) {
    const uint32_t x = float_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7FFFFFFFu;
    if (ax >= 0x7F800000u) {  // inf or NaN
        if (ax == 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u);
        return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));  // quiet NaN, top payload bits kept
    }
    if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to inf
    if (ax >= 0x38800000u) {                                               // normal fp16 (>= 2^-14)
        // Rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even; a carry out of the
        // mantissa correctly bumps the exponent (up to inf is excluded above).
        const uint32_t m = ax - 0x38000000u;  // (e-112) << 23 | mantissa
        const uint32_t rounded = m + 0x0FFFu + ((m >> 13) & 1u);
        return static_cast<uint16_t>(sign | (rounded >> 13));
    }
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to zero (2^-25 itself ties to 0)
    // Subnormal fp16: value = m · 2^-24 with m = round(ax_value · 2^24).
    const uint32_t e = ax >> 23;                    // 102..112
    const uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - e;                // 14..24: mant · 2^(e-150) · 2^24 = mant >> (126-e)
    const uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    const uint32_t up = (rem > halfway || (rem == halfway && (q & 1u))) ? 1u : 0u;
    return static_cast<uint16_t>(sign | (q + up));  // q + up may reach 0x400 = smallest normal: still right
}

inline float half_to_float_portable(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;
    if (e == 0x1Fu) {
        if (m == 0) return bits_float(sign | 0x7F800000u);
        return bits_float(sign | 0x7FC00000u | (m << 13));  // quiet NaN
    }
    if (e != 0) return bits_float(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0) return bits_float(sign);
    // Subnormal: normalise.
    int exp = 113;  // exponent field if m had its leading bit at position 10
    while ((m & 0x400u) == 0) {
        m <<= 1;
        --exp;
    }
    return bits_float(sign | (static_cast<uint32_t>(exp) << 23) | ((m & 0x3FFu) << 13));
}

}  // namespace detail

// bfloat16 = the top 16 bits of a float, rounded to nearest even (NaN kept NaN and quiet).
inline uint16_t float_to_bfloat16(float f) {
    const uint32_t x = detail::float_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
    return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}
inline float bfloat16_to_float(uint16_t b) { return detail::bits_float(static_cast<uint32_t>(b) << 16); }

uint16_t float_to_half(float f);
float half_to_float(uint16_t h);

// Bulk conversions (vectorised). `n` elements; src and dst must not overlap.
void floats_to_half(const float* src, uint16_t* dst, size_t n);
void half_to_floats(const uint16_t* src, float* dst, size_t n);
void floats_to_bfloat16(const float* src, uint16_t* dst, size_t n);
void bfloat16_to_floats(const uint16_t* src, float* dst, size_t n);

// Dispatch on a 16-bit WireFormat (Float32 is an error here).
void encode16(WireFormat w, const float* src, uint16_t* dst, size_t n);
void decode16(WireFormat w, const uint16_t* src, float* dst, size_t n);
// dst[i] = combine(dst[i], decode(src[i])) in float32, combine = + (Sum/Average), max or min (op as comm::ReduceOp).
enum class ReduceOp;
void decode16_reduce(WireFormat w, const uint16_t* src, float* dst, size_t n, ReduceOp op);
// Rounds floats in place to the nearest 16-bit value (decode(encode(x))), using `tmp` (n elements) as scratch.
void round_to_16(WireFormat w, float* data, uint16_t* tmp, size_t n);

}  // namespace ringtrain::comm

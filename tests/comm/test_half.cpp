// fp16 / bf16 conversions against references computed from the definitions (in double): every 16-bit pattern in
// the 16 -> 32 direction, and for 32 -> 16 the edge cases (±0, inf, NaN, overflow, subnormals, ties) plus a sweep of
// every rounding boundary. The F16C path (when compiled in) and the portable fallback must agree bitwise.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/half.hpp"
#include "ringtrain/core/rng.hpp"

using namespace ringtrain;
using namespace ringtrain::comm;

namespace {

uint32_t bits(float f) { return detail::float_bits(f); }
float from_bits(uint32_t u) { return detail::bits_float(u); }

// binary16 value from its fields (NaN as quiet NaN with the sign).
double ref_half_value(uint16_t h) {
    const int sign = (h & 0x8000) ? -1 : 1;
    const int e = (h >> 10) & 0x1F;
    const int m = h & 0x3FF;
    if (e == 31) return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    if (e == 0) return sign * std::ldexp(static_cast<double>(m), -24);
    return sign * std::ldexp(static_cast<double>(1024 + m), e - 25);
}

double ref_bf16_value(uint16_t b) {
    const int sign = (b & 0x8000) ? -1 : 1;
    const int e = (b >> 7) & 0xFF;
    const int m = b & 0x7F;
    if (e == 255) return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    if (e == 0) return sign * std::ldexp(static_cast<double>(m), -133);
    return sign * std::ldexp(static_cast<double>(128 + m), e - 134);
}

// Round-to-nearest-even into a format whose non-negative finite patterns 0..max_pattern are increasing in value;
// `value(max_pattern + 1)` is treated as the next step (the overflow threshold is the midpoint, IEEE rule).
template <class Value>
uint16_t ref_round(float x, uint16_t max_pattern, uint16_t inf_pattern, double next_after_max, Value value) {
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double ax = std::fabs(static_cast<double>(x));
    if (std::isinf(x)) return sign | inf_pattern;
    // Largest pattern with value <= ax.
    uint32_t lo = 0, hi = max_pattern;
    if (ax >= value(max_pattern)) {
        lo = max_pattern;
    } else {
        while (lo < hi) {  // invariant: value(lo) <= ax < value(hi + 1)
            const uint32_t mid = (lo + hi + 1) / 2;
            if (value(static_cast<uint16_t>(mid)) <= ax) lo = mid;
            else hi = mid - 1;
        }
    }
    const double vlo = value(static_cast<uint16_t>(lo));
    if (vlo == ax) return static_cast<uint16_t>(sign | lo);
    const double vhi = lo == max_pattern ? next_after_max : value(static_cast<uint16_t>(lo + 1));
    const double dlo = ax - vlo, dhi = vhi - ax;
    uint32_t pick;
    if (dlo < dhi) pick = lo;
    else if (dhi < dlo) pick = lo + 1;
    else pick = (lo & 1) ? lo + 1 : lo;  // tie: even pattern
    if (pick > max_pattern) return sign | inf_pattern;
    return static_cast<uint16_t>(sign | pick);
}

uint16_t ref_to_half(float x) {
    return ref_round(x, 0x7BFF, 0x7C00, 65536.0, [](uint16_t h) { return ref_half_value(h); });
}
uint16_t ref_to_bf16(float x) {
    return ref_round(x, 0x7F7F, 0x7F80, std::ldexp(1.0, 128), [](uint16_t b) { return ref_bf16_value(b); });
}

bool is_half_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
bool is_bf16_nan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; }

// Checks every conversion path of one float; returns false (and records it) on the first disagreement.
struct Checker {
    size_t checked = 0, bad = 0;
    uint32_t first_bad = 0;
    void fail(float x) {
        if (bad++ == 0) first_bad = bits(x);
    }
    void check(float x) {
        ++checked;
        const uint16_t h = float_to_half(x), hp = detail::float_to_half_portable(x);
        const uint16_t b = float_to_bfloat16(x);
        if (h != hp) return fail(x);
        if (std::isnan(x)) {
            // NaN stays NaN with its sign; the quiet bit is set.
            if (!is_half_nan(h) || (h & 0x8000) != ((bits(x) >> 16) & 0x8000) || !(h & 0x200)) return fail(x);
            if (!is_bf16_nan(b) || (b & 0x8000) != ((bits(x) >> 16) & 0x8000) || !(b & 0x40)) return fail(x);
            return;
        }
        if (h != ref_to_half(x)) return fail(x);
        if (b != ref_to_bf16(x)) return fail(x);
    }
};

std::string hex(uint32_t u) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08X", u);
    return buf;
}

}  // namespace

TEST_CASE("fp16 -> float: all 65536 patterns match the definition; F16C and portable agree", "[half]") {
#if defined(__F16C__)
    INFO("F16C path compiled in");
#else
    INFO("portable path only");
#endif
    size_t bad = 0;
    int first = -1;
    for (uint32_t p = 0; p < 65536; ++p) {
        const uint16_t h = static_cast<uint16_t>(p);
        const float f = half_to_float(h), fp = detail::half_to_float_portable(h);
        const double want = ref_half_value(h);
        bool ok = bits(f) == bits(fp);
        if (is_half_nan(h)) {
            // Quiet NaN, sign kept, payload in the top mantissa bits.
            ok = ok && std::isnan(f) && (bits(f) >> 31) == (p >> 15) && (bits(f) & 0x400000u) &&
                 ((bits(f) >> 13) & 0x1FFu) == (p & 0x1FFu);
        } else {
            ok = ok && static_cast<double>(f) == want && std::signbit(f) == ((p & 0x8000) != 0);
            // And back again, exactly.
            ok = ok && float_to_half(f) == h && detail::float_to_half_portable(f) == h;
        }
        if (!ok && bad++ == 0) first = static_cast<int>(p);
    }
    INFO("first bad pattern " << first);
    CHECK(bad == 0);
}

TEST_CASE("bf16 -> float: all 65536 patterns match the definition and round-trip", "[half]") {
    size_t bad = 0;
    int first = -1;
    for (uint32_t p = 0; p < 65536; ++p) {
        const uint16_t b = static_cast<uint16_t>(p);
        const float f = bfloat16_to_float(b);
        bool ok;
        if (is_bf16_nan(b)) ok = std::isnan(f) && bits(f) == (p << 16);
        else ok = static_cast<double>(f) == ref_bf16_value(b) && float_to_bfloat16(f) == b;
        if (!ok && bad++ == 0) first = static_cast<int>(p);
    }
    INFO("first bad pattern " << first);
    CHECK(bad == 0);
}

TEST_CASE("float -> fp16 / bf16 edge cases", "[half]") {
    const float inf = std::numeric_limits<float>::infinity();
    // fp16
    CHECK(float_to_half(0.0f) == 0x0000);
    CHECK(float_to_half(-0.0f) == 0x8000);
    CHECK(float_to_half(1.0f) == 0x3C00);
    CHECK(float_to_half(-2.0f) == 0xC000);
    CHECK(float_to_half(inf) == 0x7C00);
    CHECK(float_to_half(-inf) == 0xFC00);
    CHECK(float_to_half(65504.0f) == 0x7BFF);                         // largest finite
    CHECK(float_to_half(std::nextafter(65520.0f, 0.0f)) == 0x7BFF);   // just under the overflow midpoint
    CHECK(float_to_half(65520.0f) == 0x7C00);                         // the midpoint ties to even = inf
    CHECK(float_to_half(-65520.0f) == 0xFC00);
    CHECK(float_to_half(1e10f) == 0x7C00);
    CHECK(float_to_half(std::numeric_limits<float>::max()) == 0x7C00);
    CHECK(float_to_half(std::ldexp(1.0f, -14)) == 0x0400);            // smallest normal
    CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);            // smallest subnormal
    CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);            // tie between 0 and 2^-24: even (0)
    CHECK(float_to_half(-std::ldexp(1.0f, -25)) == 0x8000);
    CHECK(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(float_to_half(3 * std::ldexp(1.0f, -25)) == 0x0002);        // tie between 1 and 2 units: 2
    CHECK(float_to_half(5 * std::ldexp(1.0f, -25)) == 0x0002);        // tie between 2 and 3 units: 2
    CHECK(float_to_half(1023 * std::ldexp(1.0f, -24)) == 0x03FF);     // largest subnormal
    CHECK(float_to_half(std::ldexp(2047.0f, -25)) == 0x0400);         // rounds up into the normals
    CHECK(float_to_half(std::numeric_limits<float>::denorm_min()) == 0x0000);
    CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);     // tie: to even (1)
    CHECK(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02); // tie: to even (1 + 2^-9)
    CHECK(float_to_half(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)) == 0x3C01);
    CHECK(float_to_half(2047.0f * std::ldexp(1.0f, -11) + 1.0f) == 0x4000);  // carry into the exponent: 2.0
    // NaN: quiet, sign and top payload bits kept (signalling input too).
    const float snan = from_bits(0x7F800001u), qnan = from_bits(0xFFC12345u);
    CHECK(is_half_nan(float_to_half(snan)));
    CHECK(is_half_nan(float_to_half(qnan)));
    CHECK((float_to_half(qnan) & 0x8000) == 0x8000);
    CHECK(float_to_half(qnan) == detail::float_to_half_portable(qnan));
    CHECK(float_to_half(snan) == detail::float_to_half_portable(snan));
    // bf16
    CHECK(float_to_bfloat16(1.0f) == 0x3F80);
    CHECK(float_to_bfloat16(-0.0f) == 0x8000);
    CHECK(float_to_bfloat16(inf) == 0x7F80);
    CHECK(float_to_bfloat16(-inf) == 0xFF80);
    CHECK(float_to_bfloat16(std::numeric_limits<float>::max()) == 0x7F80);  // above max bf16 + half ulp
    CHECK(float_to_bfloat16(from_bits(0x7F7F7FFFu)) == 0x7F7F);           // below the overflow midpoint
    CHECK(float_to_bfloat16(from_bits(0x7F7F8000u)) == 0x7F80);           // the midpoint: odd -> up = inf
    CHECK(float_to_bfloat16(from_bits(0x3F808000u)) == 0x3F80);           // tie: to even
    CHECK(float_to_bfloat16(from_bits(0x3F818000u)) == 0x3F82);           // tie: to even (up)
    CHECK(float_to_bfloat16(from_bits(0x3F808001u)) == 0x3F81);
    CHECK(float_to_bfloat16(from_bits(0x00008000u)) == 0x0000);           // subnormal tie to even
    CHECK(float_to_bfloat16(from_bits(0x00018000u)) == 0x0002);
    CHECK(is_bf16_nan(float_to_bfloat16(snan)));                          // payload only in the low bits: still NaN
    CHECK(is_bf16_nan(float_to_bfloat16(qnan)));

    // The same cases through the reference checker (both formats, both paths).
    Checker c;
    for (float x : {0.0f, -0.0f, 1.0f, 65504.0f, 65520.0f, std::nextafter(65520.0f, 0.0f), 1e10f, std::ldexp(1.0f, -25),
                    3 * std::ldexp(1.0f, -25), std::ldexp(1.0f, -24), std::numeric_limits<float>::denorm_min(),
                    std::numeric_limits<float>::min(), std::numeric_limits<float>::max(), inf, -inf, snan, qnan})
        c.check(x), c.check(-x);
    INFO("first bad " << hex(c.first_bad));
    CHECK(c.bad == 0);
}

TEST_CASE("float -> fp16 / bf16: every rounding boundary and random floats match the reference", "[half]") {
    Checker c;
    // Every setting of the top 19 bits (sign, exponent, the 10 mantissa bits fp16 keeps) with the 13 dropped bits at
    // the boundaries: exact, just above, just below / at / just above the midpoint, and the largest. For bf16 the
    // midpoint pattern 0x8000 of the 16 dropped bits is covered by the second loop.
    const uint32_t lows[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF};
    for (uint32_t top = 0; top < (1u << 19); ++top)
        for (uint32_t low : lows) c.check(from_bits((top << 13) | low));
    const uint32_t lows16[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
    for (uint32_t top = 0; top < (1u << 16); ++top)
        for (uint32_t low : lows16) c.check(from_bits((top << 16) | low));
    Rng rng(2024);
    for (int i = 0; i < 1000000; ++i) c.check(from_bits(static_cast<uint32_t>(rng.next_u64())));
    INFO("checked " << c.checked << ", first bad " << hex(c.first_bad));
    CHECK(c.bad == 0);
}

TEST_CASE("bulk conversions equal the scalar ones (vector bodies and tails)", "[half]") {
    Rng rng(7);
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{1000}, size_t{4099}}) {
        std::vector<float> x(n);
        for (auto& v : x) v = rng.normal() * std::ldexp(1.0f, static_cast<int>(rng.below(40)) - 25);
        if (n > 3) x[1] = std::numeric_limits<float>::infinity(), x[2] = std::nanf("");
        std::vector<uint16_t> h(n), b(n);
        floats_to_half(x.data(), h.data(), n);
        floats_to_bfloat16(x.data(), b.data(), n);
        std::vector<float> hf(n), bf(n), acc(n, 1.0f);
        half_to_floats(h.data(), hf.data(), n);
        bfloat16_to_floats(b.data(), bf.data(), n);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
            bad += h[i] != float_to_half(x[i]);
            bad += b[i] != float_to_bfloat16(x[i]);
            bad += bits(hf[i]) != bits(half_to_float(h[i]));
            bad += bits(bf[i]) != bits(bfloat16_to_float(b[i]));
        }
        // encode16 / decode16 / decode16_reduce dispatch.
        std::vector<uint16_t> e(n);
        encode16(WireFormat::Float16, x.data(), e.data(), n);
        bad += e != h;
        decode16_reduce(WireFormat::Float16, e.data(), acc.data(), n, ReduceOp::Sum);
        for (size_t i = 0; i < n; ++i)
            if (!std::isnan(hf[i])) bad += acc[i] != 1.0f + hf[i];
        std::vector<float> r = x;
        round_to_16(WireFormat::BFloat16, r.data(), e.data(), n);
        for (size_t i = 0; i < n; ++i) bad += bits(r[i]) != bits(bf[i]);
        INFO("n " << n);
        CHECK(bad == 0);
    }
    CHECK_THROWS(encode16(WireFormat::Float32, nullptr, nullptr, 0));
    CHECK(std::string(wire_format_name(WireFormat::BFloat16)) == "bf16");
    CHECK(wire_element_size(WireFormat::Float16) == 2);
}

#include <bit>
#include <charconv>
#include <cstring>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ringtrain/data/sparse_libsvm.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ringtrain::data {

namespace {

// Space, \t, \v, \f, \r (not \n, which ends the line before a parser sees it): one comparison for printable bytes.
bool is_blank(char c) { return c == ' ' || (c >= '\t' && c <= '\r' && c != '\n'); }

// The whole of `s` as a base-10 integer.
template <class Int>
bool parse_whole(std::string_view s, Int& v) {
    if (s.empty()) return false;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc() && end == s.data() + s.size();
}

// 10^k as floats, exact for k <= 10 (10^10 < 2^24 · 2^10); used up to k = 7.
constexpr float kPow10[] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f};

bool parse_value(std::string_view s, float& v) {
    // Fast path for the short decimals click logs are made of ("1", "0.25", "-3.5"): at most 7 digits, so the
    // digits m < 10^7 < 2^24 and 10^k are exact floats and one IEEE division m / 10^k is the correctly rounded
    // value of the decimal — the same float from_chars gives — at a fraction of from_chars' cost (it was 19 %
    // of a sparse training run's instructions; bench/RESULTS.md, "Sparse logistic regression").
    const char* p = s.data();
    const char* const e = p + s.size();
    bool negative = false;
    if (p < e && (*p == '+' || *p == '-')) negative = *p++ == '-';
    uint32_t m = 0;
    int digits = 0, fraction = -1;
    for (; p < e; ++p) {
        const char c = *p;
        if (c >= '0' && c <= '9') {
            if (++digits > 7) break;
            m = m * 10 + static_cast<uint32_t>(c - '0');
            if (fraction >= 0) ++fraction;
        } else if (c == '.' && fraction < 0) {
            fraction = 0;
        } else {
            break;
        }
    }
    if (p == e && digits > 0) {
        float f = static_cast<float>(m);
        if (fraction > 0) f /= kPow10[fraction];
        v = negative ? -f : f;
        return true;
    }
    if (!s.empty() && s[0] == '+') s.remove_prefix(1);  // from_chars takes no '+' (a second one stays an error)
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc() && end == s.data() + s.size() && std::isfinite(v);
}

// Labels written as floats ("1.0", "-1.0", "2.0"), as some exporters do.
bool integral_label(std::string_view s, int64_t& label) {
    double v = 0;
    if (!s.empty() && s[0] == '+') s.remove_prefix(1);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v != std::floor(v) || v < -1 || v > 1e9)
        return false;
    label = static_cast<int64_t>(v);
    return true;
}

// The number the first `len` (1..8) bytes of x spell, x little-endian and those bytes ASCII digits (SWAR: three
// multiplies for up to eight digits).
uint32_t digits_value(uint64_t x, unsigned len) {
    uint64_t t = (x ^ 0x3030303030303030ULL) << (64 - 8 * len);  // the digits in the high bytes, zeros before
    t = (t * 10 + (t >> 8)) & 0x00FF00FF00FF00FFULL;
    t = (t * 100 + (t >> 16)) & 0x0000FFFF0000FFFFULL;
    t = (t * 10000 + (t >> 32)) & 0xFFFFFFFFULL;
    return static_cast<uint32_t>(t);
}
#if !defined(__SSE2__)
// How many of x's first bytes are ASCII digits.
size_t leading_digits(uint64_t x) {
    const uint64_t t = x ^ 0x3030303030303030ULL;  // a digit byte becomes 0..9
    const uint64_t flagged = (((t & 0x7F7F7F7F7F7F7F7FULL) + 0x7676767676767676ULL) | t) & 0x8080808080808080ULL;
    return flagged == 0 ? 8 : static_cast<size_t>(std::countr_zero(flagged)) / 8;
}
uint64_t load8(const char* p) {
    uint64_t x;
    std::memcpy(&x, p, 8);
    return x;
}
#endif
constexpr uint32_t kPow10Int[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};

#if defined(__SSE2__)
// Per-byte classes of 16 bytes as bit masks (bit i = byte i): one load, and every position inside a token is then a
// bit count, not a load that waits on the previous one (the SWAR path below loads the index, then the value at the
// ':' it found, then the fraction at the '.'). bench/RESULTS.md, "The libsvm parser's fast path on SSE2".
struct ByteClasses {
    uint32_t digit, colon, dot, blank;
    uint64_t lo, hi;  // the 16 bytes, little-endian
};
ByteClasses classify16(const char* p) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i d = _mm_sub_epi8(v, _mm_set1_epi8('0'));
    const __m128i digit = _mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d);  // (c - '0') as unsigned <= 9
    const __m128i c = _mm_sub_epi8(v, _mm_set1_epi8('\t'));                        // \t \n \v \f \r -> 0..4
    const __m128i blank = _mm_or_si128(
        _mm_cmpeq_epi8(v, _mm_set1_epi8(' ')),
        _mm_andnot_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\n')), _mm_cmpeq_epi8(_mm_min_epu8(c, _mm_set1_epi8(4)), c)));
    ByteClasses k;
    k.digit = static_cast<uint32_t>(_mm_movemask_epi8(digit));
    k.colon = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(':'))));
    k.dot = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('.'))));
    k.blank = static_cast<uint32_t>(_mm_movemask_epi8(blank));
    k.lo = static_cast<uint64_t>(_mm_cvtsi128_si64(v));
    k.hi = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v)));
    return k;
}

// The 8 bytes of (hi:lo) from byte `at` (0..15) on; bytes past the 16th read as 0.
uint64_t bytes_from(uint64_t lo, uint64_t hi, unsigned at) {
    const unsigned __int128 w = (static_cast<unsigned __int128>(hi) << 64) | lo;
    return static_cast<uint64_t>(w >> (8 * at));
}
#endif

// A line's features collected in a local block and appended to the batch's vectors 64 at a time, not with two
// push_backs a feature (each loading and storing its vector's end through memory): 3-8 % of the parser's time.
struct FeatureSink {
    static constexpr size_t kBlock = 64;
    FeatureSink(std::vector<uint32_t>& ids_out, std::vector<float>& vals_out) : out_ids(ids_out), out_vals(vals_out) {}
    uint32_t ids[kBlock];
    float vals[kBlock];
    size_t n = 0;
    std::vector<uint32_t>& out_ids;
    std::vector<float>& out_vals;
    void push(uint32_t id, float v) {
        ids[n] = id;
        vals[n] = v;
        if (++n == kBlock) flush();
    }
    void flush() {
        out_ids.insert(out_ids.end(), ids, ids + n);
        out_vals.insert(out_vals.end(), vals, vals + n);
        n = 0;
    }
};

// Where a line's features go, and the checks every path makes: an id in range and above the line's previous one.
struct FeatureTarget {
    uint64_t base, limit;
    int64_t& previous;
    FeatureSink& sink;
    // Appends index idx's value; false when the id is out of range or does not increase (the general loop then
    // names what is wrong).
    bool take(uint64_t idx, float value) {
        const uint64_t id = idx - base;
        if (idx < base || id >= limit || static_cast<int64_t>(id) <= previous) return false;
        sink.push(static_cast<uint32_t>(id), value);
        previous = static_cast<int64_t>(id);
        return true;
    }
};

// Each take_*_token reads the token at p (not a blank) in the common form — "digits:value", an index of at most 7
// digits, a value of at most 7 digits (the byte loop also takes a sign), then a blank or the line's end — appends
// it and returns where it ends; nullptr when it does not take it. The values are parse_value's fast path: m and 10^k
// exact floats, one correctly rounded division.
#if defined(__SSE2__)
const char* take_sse2_token(const char* p, const char* e, FeatureTarget& to) {
    // 16 bytes from the token: loaded in place while the line has them, else copied (zero-padded, so the line's end
    // reads as a stop that is not a blank).
    const size_t left = static_cast<size_t>(e - p);
    alignas(16) char tail[16];
    const char* q = p;
    if (left < 16) {
        std::memset(tail, 0, sizeof tail);
        std::memcpy(tail, p, left);
        q = tail;
    }
    const ByteClasses k = classify16(q);
    const uint32_t stop = ~k.digit | 0x10000u;  // a non-digit, or the 17th byte
    const unsigned li = static_cast<unsigned>(std::countr_zero(stop));
    if (li < 1 || li > 7 || ((k.colon >> li) & 1) == 0) return nullptr;
    // The value's parts without a branch on its '.': in click logs "1" and "0.25" come in no order a branch
    // predictor could learn (such a branch cost ~12 % of the parser's time).
    const unsigned v = li + 1;
    const unsigned lv = static_cast<unsigned>(std::countr_zero(stop >> v));
    const unsigned has_dot = (k.dot >> (v + lv)) & 1;
    const unsigned fraction = has_dot * static_cast<unsigned>(std::countr_zero(stop >> (v + lv + 1)));
    const unsigned end = v + lv + has_dot * (1 + fraction);
    // The token ends at a blank inside the 16 bytes, or exactly where the line ends.
    const bool ended = end < 16 && (((k.blank >> end) & 1) || end == left);
    if (lv < 1 || lv + fraction > 7 || !ended) return nullptr;
    // The value's digits with the '.' taken out, as one number: "0.25" -> 25, then / 10^2.
    const uint64_t value = bytes_from(k.lo, k.hi, v);
    const uint64_t before = (uint64_t{1} << (8 * lv)) - 1;  // lv <= 7
    const uint64_t joined = (value & before) | ((value >> 8) & ~before);
    const uint64_t pick = uint64_t{0} - has_dot;  // all ones with a dot (a ?: here became a branch)
    const uint32_t m = digits_value(value ^ ((value ^ joined) & pick), lv + fraction);
    if (!to.take(digits_value(k.lo, li), static_cast<float>(m) / kPow10[fraction])) return nullptr;  // 10^0: exact
    return p + end;
}
#else
const char* take_swar_token(const char* p, const char* e, FeatureTarget& to) {
    if constexpr (std::endian::native != std::endian::little) return nullptr;
    // Index and value eight bytes at a time while 24 bytes are left (every load stays inside the line).
    if (e - p < 24) return nullptr;
    const uint64_t x = load8(p);
    const size_t li = leading_digits(x);
    if (li < 1 || li > 7 || p[li] != ':') return nullptr;
    const char* const v = p + li + 1;
    const uint64_t y = load8(v);
    const size_t lv = leading_digits(y);
    if (lv < 1 || lv > 7) return nullptr;
    const char* end = v + lv;
    uint32_t m = digits_value(y, static_cast<unsigned>(lv));
    size_t fraction = 0;
    if (v[lv] == '.') {
        const uint64_t z = load8(v + lv + 1);
        fraction = leading_digits(z);
        if (lv + fraction > 7) return nullptr;
        m = m * kPow10Int[fraction] + (fraction > 0 ? digits_value(z, static_cast<unsigned>(fraction)) : 0);
        end = v + lv + 1 + fraction;
    }
    if (end != e && !is_blank(*end)) return nullptr;
    float f = static_cast<float>(m);
    if (fraction > 0) f /= kPow10[fraction];
    return to.take(digits_value(x, static_cast<unsigned>(li)), f) ? end : nullptr;
}
#endif

// The byte at a time way: also a sign, and the tokens near a line's end on targets without SSE2.
const char* take_byte_token(const char* p, const char* e, FeatureTarget& to) {
    const char* const token = p;
    const char* stop = e - p > 10 ? p + 10 : e;
    uint64_t idx = 0;
    unsigned d = 0;
    while (p < stop && (d = static_cast<unsigned char>(*p - '0')) < 10) {
        idx = idx * 10 + d;
        ++p;
    }
    if (p == token || p == e || *p != ':') return nullptr;
    ++p;
    bool negative = false;
    if (p < e && (*p == '-' || *p == '+')) negative = *p++ == '-';
    const char* const m0 = p;
    stop = e - p > 7 ? p + 7 : e;
    uint32_t m = 0;
    while (p < stop && (d = static_cast<unsigned char>(*p - '0')) < 10) {
        m = m * 10 + d;
        ++p;
    }
    auto digits = static_cast<int>(p - m0), fraction = 0;
    if (p < e && *p == '.') {
        const char* const f0 = ++p;
        stop = e - p > 7 - digits ? p + (7 - digits) : e;
        while (p < stop && (d = static_cast<unsigned char>(*p - '0')) < 10) {
            m = m * 10 + d;
            ++p;
        }
        fraction = static_cast<int>(p - f0);
        digits += fraction;
    }
    // An 8th digit, an exponent, a second '.', ... end here without a blank: the general loop decides.
    if (digits == 0 || (p < e && !is_blank(*p))) return nullptr;
    float f = static_cast<float>(m);
    if (fraction > 0) f /= kPow10[fraction];
    return to.take(idx, negative ? -f : f) ? p : nullptr;
}

// The features of [p, e) in the common form appended to the sink. Returns where it stopped: e, or the first token
// it does not take, which the general loop then reads (and names, when it is wrong). It takes only digits, signs,
// ':', '.' and blanks, so a '#' (a comment) always stops it.
const char* parse_common_features_into(const char* p, const char* const e, FeatureTarget to) {
    for (;;) {
        while (p < e && is_blank(*p)) ++p;
        if (p == e) return p;
#if defined(__SSE2__)
        const char* end = take_sse2_token(p, e, to);
#else
        const char* end = take_swar_token(p, e, to);
#endif
        if (end == nullptr) end = take_byte_token(p, e, to);
        if (end == nullptr) return p;
        p = end;
    }
}

// parse_common_features_into, appending to the batch's vectors.
const char* parse_common_features(const char* p, const char* const e, uint64_t base, uint64_t limit,
                                  int64_t& previous, std::vector<uint32_t>& ids, std::vector<float>& vals) {
    FeatureSink sink{ids, vals};
    const char* const stopped = parse_common_features_into(p, e, FeatureTarget{base, limit, previous, sink});
    sink.flush();
    return stopped;
}

}  // namespace

LibsvmLineParser::LibsvmLineParser(LibsvmOptions options) : options_(options) {
    if (options_.index_base != 0 && options_.index_base != 1)
        throw InputError("data.index_base must be 0 or 1 (got " + std::to_string(options_.index_base) + ")");
    if (options_.num_features < 0 || options_.num_features > kMaxFeatures)
        throw InputError("data.num_features must be between 0 (= from the training file) and 2^32 (got " +
                         std::to_string(options_.num_features) + ")");
    if (options_.num_classes < 0)
        throw InputError("num_classes must be >= 0 (got " + std::to_string(options_.num_classes) + ")");
}

int64_t LibsvmLineParser::parse_label(std::string_view text) const {
    int64_t label = -2;
    if (text == "+1") {
        label = 1;
    } else if (!parse_whole(text, label) && !integral_label(text, label)) {
        label = -2;
    }
    if (label < -1)
        throw SparseLineError("bad label '" + shown_token(text) + "' (expected 0/1, -1/+1 or a class number 0..K-1)");
    if (label == -1) label = 0;
    if (options_.num_classes > 0 && label >= options_.num_classes)
        throw SparseLineError("label " + std::to_string(label) + " is not a class number below " +
                              std::to_string(options_.num_classes));
    return label;
}

void LibsvmLineParser::parse_general_token(std::string_view tok, int64_t& previous, CsrBatch& out) const {
    uint64_t idx = 0;
    size_t colon = 0;
    while (colon < tok.size() && colon < 11 && tok[colon] >= '0' && tok[colon] <= '9')
        idx = idx * 10 + static_cast<uint64_t>(tok[colon++] - '0');
    if (colon == 0 || colon > 10 || colon == tok.size() || tok[colon] != ':') {
        colon = tok.find(':');
        if (colon == std::string_view::npos)
            throw SparseLineError("bad feature '" + shown_token(tok) + "' (expected idx:val)");
        const std::string_view key = tok.substr(0, colon);
        if (key == "qid") {
            int64_t qid = 0;
            if (!parse_whole(tok.substr(colon + 1), qid))
                throw SparseLineError("bad qid '" + shown_token(tok) + "' (expected qid:N)");
            return;
        }
        if (key.empty() || key[0] == '-' || !parse_whole(key, idx))
            throw SparseLineError("bad feature index in '" + shown_token(tok) +
                                  "' (expected idx:val, idx an integer >= " + std::to_string(options_.index_base) + ")");
    }
    float v = 0;
    if (!parse_value(tok.substr(colon + 1), v))
        throw SparseLineError("bad feature value in '" + shown_token(tok) + "' (expected idx:val, val a finite number)");
    const auto base = static_cast<uint64_t>(options_.index_base);
    const uint64_t id = idx - base;
    // One comparison for the three range checks of a good token (idx >= base, id below the feature count and
    // above the previous id); the messages are sorted out only on a failure.
    if (idx < base || id >= static_cast<uint64_t>(num_features()) || static_cast<int64_t>(id) <= previous) [[unlikely]] {
        if (idx < base)
            throw SparseLineError("feature index 0 in '" + shown_token(tok) +
                                  "' but data.index_base is 1 (set data.index_base to 0 for 0-based files)");
        if (id >= static_cast<uint64_t>(num_features()))
            throw SparseLineError("feature index " + std::to_string(idx) + " is past data.num_features = " +
                                  std::to_string(num_features()) +
                                  (options_.index_base == 1 ? " (1-based)" : " (0-based)") +
                                  "; raise data.num_features (0 = from the training file)");
        throw SparseLineError("feature index " + std::to_string(idx) +
                              " does not increase (indices must be strictly increasing within a line)");
    }
    previous = static_cast<int64_t>(id);
    out.indices.push_back(static_cast<uint32_t>(id));
    out.values.push_back(v);
}

bool LibsvmLineParser::parse(std::string_view line, CsrBatch& out) const {
    size_t p = 0;
    size_t n = line.size();
    auto next_token = [&]() -> std::string_view {
        while (p < n && is_blank(line[p])) ++p;
        const size_t start = p;
        while (p < n && !is_blank(line[p])) ++p;
        return line.substr(start, p - start);
    };
    // '#' starts a comment to the end of the line. It is looked for only where it can be: in the label's token,
    // and after the features the fast path took (which stops at any byte but digits, ':', '.' and blanks) —
    // not with a search of every line (a memchr a line, ~4 % of a training run).
    std::string_view label_text = next_token();
    if (const size_t hash = label_text.find('#'); hash != std::string_view::npos) {
        label_text = label_text.substr(0, hash);
        n = p = static_cast<size_t>(label_text.data() - line.data()) + hash;
    }
    if (label_text.empty()) return false;
    const int64_t label = parse_label(label_text);

    int64_t previous = -1;
    const char* const stopped =
        parse_common_features(line.data() + p, line.data() + n, static_cast<uint64_t>(options_.index_base),
                              static_cast<uint64_t>(num_features()), previous, out.indices, out.values);
    p = static_cast<size_t>(stopped - line.data());
    if (p < n)
        if (const size_t hash = line.find('#', p); hash != std::string_view::npos) n = hash;
    for (std::string_view tok = next_token(); !tok.empty(); tok = next_token()) parse_general_token(tok, previous, out);
    out.labels.push_back(static_cast<float>(label));
    out.offsets.push_back(static_cast<int64_t>(out.indices.size()));
    return true;
}

}  // namespace ringtrain::data

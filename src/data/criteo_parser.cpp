#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <string>

#include "ringtrain/core/hash.hpp"
#include "ringtrain/data/sparse_criteo.hpp"

namespace ringtrain::data {

int64_t criteo_log2_bucket(int64_t v) {
    if (v <= 2) return v;
    const double l = std::log(static_cast<double>(v));
    return static_cast<int64_t>(std::floor(l * l));
}

uint32_t criteo_feature_index(int column, std::string_view key, int hash_bits) {
    const auto column_byte = static_cast<unsigned char>(column);
    const uint64_t h = fnv1a(key.data(), key.size(), fnv1a(&column_byte, 1));
    const uint64_t mask = (uint64_t{1} << hash_bits) - 1;
    return static_cast<uint32_t>(mix64(h) & mask);
}

CriteoLineParser::CriteoLineParser(int hash_bits, CriteoIntegers integers) : hash_bits_(hash_bits), integers_(integers) {
    if (hash_bits < 1 || hash_bits > 31)
        throw InputError("data.hash_bits must be between 1 and 31 (got " + std::to_string(hash_bits) + ")");
}

namespace {

// Splits the line at tabs into `field` (the first kCriteoColumns); returns how many columns the line has.
// A plain loop rather than memchr per field: fields are a few bytes long (parse rates: bench/RESULTS.md,
// "Streaming parse rates").
int split_columns(std::string_view line, std::array<std::string_view, kCriteoColumns>& field) {
    int columns = 0;
    const char* const text = line.data();
    const size_t n = line.size();
    for (size_t p = 0, start = 0;; ++p) {
        if (p == n || text[p] == '\t') {
            if (columns < kCriteoColumns) field[static_cast<size_t>(columns)] = std::string_view(text + start, p - start);
            ++columns;
            if (p == n) return columns;
            start = p + 1;
        }
    }
}

// ids[0..count) sorted, each distinct id appended once with its count as the value (two columns may hash alike).
void append_counted(std::array<uint32_t, kCriteoColumns>& ids, size_t count, CsrBatch& out) {
    for (size_t i = 1; i < count; ++i) {  // insertion sort: at most 39 ids, mostly short runs
        const uint32_t v = ids[i];
        size_t j = i;
        for (; j > 0 && ids[j - 1] > v; --j) ids[j] = ids[j - 1];
        ids[j] = v;
    }
    for (size_t i = 0; i < count;) {
        size_t j = i + 1;
        while (j < count && ids[j] == ids[i]) ++j;
        out.indices.push_back(ids[i]);
        out.values.push_back(static_cast<float>(j - i));
        i = j;
    }
}

}  // namespace

uint32_t CriteoLineParser::column_feature(int c, std::string_view f) const {
    if (c > kCriteoIntegerColumns) return criteo_feature_index(c, f, hash_bits_);
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
    if (ec != std::errc() || end != f.data() + f.size())
        throw SparseLineError("column I" + std::to_string(c) + ": '" + shown_token(f) + "' is not an integer");
    if (integers_ != CriteoIntegers::Log2) return criteo_feature_index(c, f, hash_bits_);
    char digits[24];
    const auto r = std::to_chars(digits, digits + sizeof digits, criteo_log2_bucket(v));
    return criteo_feature_index(c, std::string_view(digits, static_cast<size_t>(r.ptr - digits)), hash_bits_);
}

bool CriteoLineParser::parse(std::string_view line, CsrBatch& out) const {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) return false;

    std::array<std::string_view, kCriteoColumns> field;
    if (const int columns = split_columns(line, field); columns != kCriteoColumns)
        throw SparseLineError(std::to_string(columns) + " tab-separated columns, expected " +
                              std::to_string(kCriteoColumns) + " (label, I1..I13, C1..C26)");
    float label = 0;
    if (field[0] == "1")
        label = 1;
    else if (field[0] != "0")
        throw SparseLineError("bad label '" + shown_token(field[0]) + "' (expected 0 or 1)");

    std::array<uint32_t, kCriteoColumns> ids;
    size_t count = 0;
    for (int c = 1; c < kCriteoColumns; ++c)
        if (const std::string_view f = field[static_cast<size_t>(c)]; !f.empty()) ids[count++] = column_feature(c, f);
    append_counted(ids, count, out);
    out.labels.push_back(label);
    out.offsets.push_back(static_cast<int64_t>(out.indices.size()));
    return true;
}

}  // namespace ringtrain::data

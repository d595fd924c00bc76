// The Criteo Display Advertising layout: 40 tab-separated columns per line, `label I1..I13 C1..C26`.
//   label: 0 or 1. I1..I13 (columns 1..13): integers (negative allowed). C1..C26 (columns 14..39): any bytes
//   (Criteo ships 8 hex digits). An empty field is missing and gives no feature. Empty lines hold no row; a
//   trailing '\r' is ignored.
// Features: one per present field, value 1.0, at index criteo_feature_index(column, key, hash_bits) where key is
//   - C columns: the field's bytes;
//   - I columns with criteo_integers "hash": the field's bytes as written (so "07" and "7" differ);
//   - I columns with "log2" (default): the decimal text (std::to_chars, e.g. "-1", "0", "2", "17") of
//     criteo_log2_bucket(value): the Criteo-contest winners' transform, v > 2 -> floor(ln(v)^2), else v itself
//     (0, 1, 2 and each negative value are buckets of their own).
// Two fields hashing to the same index in one row are merged into one feature with the values summed (2.0), so
// rows keep CsrBatch's strictly increasing order.
#pragma once

#include <cstdint>
#include <string_view>

#include "ringtrain/data/sparse_line_parser.hpp"
#include "ringtrain/data/sparse_reader.hpp"

namespace ringtrain::data {

inline constexpr int kCriteoColumns = 40;         // label + 13 integer + 26 categorical
inline constexpr int kCriteoIntegerColumns = 13;  // columns 1..13

// floor(ln(v)^2) for v > 2, else v.
int64_t criteo_log2_bucket(int64_t v);

// The hashed feature id of (column, key): h = FNV-1a 64 (core/hash.hpp, offset basis 0xCBF29CE484222325, prime
// 0x100000001B3) over one byte holding `column` (1..39) followed by the key's bytes; then mix64(h) (SplitMix64's
// finaliser, core/hash.hpp, so the low bits depend on every input bit); the feature id is its low hash_bits bits.
uint32_t criteo_feature_index(int column, std::string_view key, int hash_bits);

class CriteoLineParser final : public SparseLineParser {
public:
    CriteoLineParser(int hash_bits, CriteoIntegers integers);
    bool parse(std::string_view line, CsrBatch& out) const override;
    int64_t num_features() const override { return int64_t{1} << hash_bits_; }

private:
    // Column c's (1..39) non-empty field as a feature id: integers checked and bucketed or hashed, categories hashed.
    uint32_t column_feature(int c, std::string_view f) const;

    int hash_bits_;
    CriteoIntegers integers_;
};

}  // namespace ringtrain::data

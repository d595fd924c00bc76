// The libsvm / svmlight line format: `label [qid:N] idx:val idx:val ... [# comment]`.
//   label: an integer (or an integral float, "1.0"): -1 -> 0, +1 -> 1, 0..K-1 as is (binary 0/1 is K = 2);
//          anything else is an error.
//   idx:val: idx a decimal integer >= index_base (1 by default, as libsvm; or 0), val a finite decimal float;
//            indices strictly increasing within a line; idx - index_base below num_features when it is > 0.
//   qid:N is accepted anywhere after the label and ignored. '#' starts a comment to the end of the line; a line
//   that is empty, blank or only a comment holds no row. Fields are separated by spaces or tabs; a trailing '\r'
//   (CRLF files) is ignored.
#pragma once

#include <cstdint>

#include "ringtrain/data/sparse_line_parser.hpp"

namespace ringtrain::data {

struct LibsvmOptions {
    int index_base = 1;
    int64_t num_features = 0;  // 0 = no upper bound check (indices must still fit in 32 bits)
    int64_t num_classes = 0;   // 0 = no check
};

class LibsvmLineParser final : public SparseLineParser {
public:
    explicit LibsvmLineParser(LibsvmOptions options);
    bool parse(std::string_view line, CsrBatch& out) const override;
    int64_t num_features() const override { return options_.num_features > 0 ? options_.num_features : kMaxFeatures; }

    static constexpr int64_t kMaxFeatures = int64_t{1} << 32;  // feature ids are uint32

private:
    // The label token as 0..K-1 (-1 read as 0); SparseLineError when it is not one.
    int64_t parse_label(std::string_view text) const;
    // One feature token the fast path did not take ("qid:N", long values, every error), appended to out unless it
    // is a qid; `previous` is the last feature id of the line.
    void parse_general_token(std::string_view tok, int64_t& previous, CsrBatch& out) const;

    LibsvmOptions options_;
};

}  // namespace ringtrain::data

// One text line of a sparse file -> one CsrBatch row. The libsvm and Criteo parsers implement this interface; the
// streaming reader, the scan and the click-log generator all use the same parsers, so every path sees exactly the
// same features for the same line.
#pragma once

#include <memory>
#include <string_view>

#include "ringtrain/core/csr_batch.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::data {

struct SparseReaderOptions;

// What is wrong with one line, without its place: the reader prefixes "FILE:LINE: " (it knows the true line
// number) and rethrows it as an InputError.
class SparseLineError : public InputError {
public:
    using InputError::InputError;
};

class SparseLineParser {
public:
    virtual ~SparseLineParser() = default;
    // Parses `line` (without its '\n'; a trailing '\r' is ignored) and appends its row to `out`. Returns false
    // for a line that holds no row (empty, or only a comment), and throws SparseLineError for a malformed one.
    virtual bool parse(std::string_view line, CsrBatch& out) const = 0;
    // The feature count every index is below.
    virtual int64_t num_features() const = 0;
};

// The parser for options.format (libsvm: index_base, num_features, num_classes; criteo: hash_bits, criteo_integers).
// Throws InputError for options out of range.
std::unique_ptr<SparseLineParser> make_sparse_line_parser(const SparseReaderOptions& options);

// Shown text of a bad token in messages: at most 40 characters, then "...".
std::string shown_token(std::string_view token);

}  // namespace ringtrain::data

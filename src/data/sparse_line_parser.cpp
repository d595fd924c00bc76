#include "ringtrain/data/sparse_line_parser.hpp"

#include "ringtrain/data/sparse_criteo.hpp"
#include "ringtrain/data/sparse_libsvm.hpp"
#include "ringtrain/data/sparse_reader.hpp"

namespace ringtrain::data {

std::unique_ptr<SparseLineParser> make_sparse_line_parser(const SparseReaderOptions& options) {
    if (options.format == SparseFormat::Criteo)
        return std::make_unique<CriteoLineParser>(options.hash_bits, options.criteo_integers);
    return std::make_unique<LibsvmLineParser>(
        LibsvmOptions{options.index_base, options.num_features, options.num_classes});
}

std::string shown_token(std::string_view token) {
    constexpr size_t kShown = 40;
    if (token.size() <= kShown) return std::string(token);
    return std::string(token.substr(0, kShown)) + "...";
}

}  // namespace ringtrain::data

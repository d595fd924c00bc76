#include "ringtrain/data/click_log_generator.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/data/sparse_criteo.hpp"
#include "ringtrain/data/sparse_libsvm.hpp"

namespace ringtrain::data {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Draws ranks 1..n with P(k) ~ k^-s from a precomputed cumulative table.
class ZipfTable {
public:
    ZipfTable(int64_t n, double s) : cdf_(static_cast<size_t>(n)) {
        double total = 0;
        for (int64_t k = 1; k <= n; ++k) cdf_[static_cast<size_t>(k - 1)] = total += std::pow(static_cast<double>(k), -s);
        for (double& c : cdf_) c /= total;
    }
    int64_t draw(Rng& rng) const {
        const double u = static_cast<double>(rng.next_u64() >> 11) * 0x1p-53;
        const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
        return std::min<int64_t>(static_cast<int64_t>(it - cdf_.begin()), static_cast<int64_t>(cdf_.size()) - 1) + 1;
    }

private:
    std::vector<double> cdf_;
};

// Criteo-like column shapes, fixed per column so the files look alike whatever the seed.
double missing_rate(int column) { return 0.02 + 0.38 * static_cast<double>((column * 7) % 13) / 12.0; }
int64_t vocabulary(int column) {  // categorical columns: 10 .. 20,000 values
    return static_cast<int64_t>(std::lround(std::pow(10.0, 1.0 + 3.3 * static_cast<double>((column * 11) % 26) / 25.0)));
}

// Writes plain or gzip text.
class TextSink {
public:
    explicit TextSink(const std::string& path) : path_(path) {
        const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
        if (gz) {
            gz_ = gzopen(path.c_str(), "wb1");
            if (!gz_)
                throw InputError(path + ": cannot create (" + std::strerror(errno) +
                                 "); --out must be in an existing, writable folder");
        } else {
            file_ = std::fopen(path.c_str(), "wb");
            if (!file_)
                throw InputError(path + ": cannot create (" + std::strerror(errno) +
                                 "); --out must be in an existing, writable folder");
        }
    }
    ~TextSink() {
        if (gz_) gzclose(gz_);
        if (file_) std::fclose(file_);
    }
    void write(const std::string& text) {
        if (text.empty()) return;
        const bool ok = gz_ ? gzwrite(gz_, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size())
                            : std::fwrite(text.data(), 1, text.size(), file_) == text.size();
        if (!ok) throw InputError(path_ + ": write failed (disk full?)");
    }
    void close() {
        const bool ok = gz_ ? gzclose(gz_) == Z_OK : std::fclose(file_) == 0;
        gz_ = nullptr;
        file_ = nullptr;
        if (!ok) throw InputError(path_ + ": write failed on close (disk full?)");
    }

private:
    std::string path_;
    gzFile gz_ = nullptr;
    std::FILE* file_ = nullptr;
};

void append_int(std::string& s, int64_t v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    s.append(buf, static_cast<size_t>(r.ptr - buf));
}

void append_hex8(std::string& s, uint64_t v) {
    static const char* digits = "0123456789abcdef";
    for (int shift = 28; shift >= 0; shift -= 4) s += digits[(v >> shift) & 0xF];
}

// One Criteo line after its label: 13 integer and 26 categorical fields, each possibly missing.
void criteo_fields(Rng& rng, uint64_t value_seed, const std::vector<ZipfTable>& zipf, std::string& line) {
    for (int c = 1; c < kCriteoColumns; ++c) {
        line += '\t';
        if (rng.uniform() < missing_rate(c)) continue;
        if (c <= kCriteoIntegerColumns) {
            if (rng.uniform() < 0.02f) {  // a few negative values, as Criteo's I2 has
                append_int(line, -1 - static_cast<int64_t>(rng.below(3)));
            } else {
                const double mu = 0.5 + 0.6 * (c % 6);
                append_int(line, static_cast<int64_t>(std::floor(std::exp(mu + 1.2 * rng.normal()))) - 1);
            }
        } else {
            const int64_t k = zipf[static_cast<size_t>(c - kCriteoIntegerColumns - 1)].draw(rng);
            append_hex8(line, mix64(value_seed + static_cast<uint64_t>(c) * kGoldenGamma + static_cast<uint64_t>(k)));
        }
    }
}

// One libsvm line after its label: 5..30 distinct Zipf-drawn ids (1-based), values 1 / 0.5 / 0.25 / 2.
void libsvm_features(Rng& rng, const ZipfTable& zipf, int64_t features, std::vector<int64_t>& ids, std::string& line) {
    const int64_t want = std::min<int64_t>(features, 5 + static_cast<int64_t>(rng.below(26)));
    ids.clear();
    for (int tries = 0; static_cast<int64_t>(ids.size()) < want && tries < 200; ++tries) {
        const int64_t id = zipf.draw(rng);
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    static const char* values[] = {"1", "1", "0.5", "0.25", "2"};
    for (const int64_t id : ids) {
        line += ' ';
        append_int(line, id);
        line += ':';
        line += values[rng.below(5)];
    }
}

double binary_entropy(double p) {
    double h = 0;
    if (p > 0) h -= p * std::log(p);
    if (p < 1) h -= (1 - p) * std::log1p(-p);
    return h;
}

}  // namespace

double click_log_true_weight(uint64_t model_seed, double weight_scale, uint64_t feature) {
    const uint64_t s = mix64(model_seed ^ 0x77656967687473ULL);
    const uint64_t a = mix64(s + (2 * feature + 1) * kGoldenGamma), b = mix64(s + (2 * feature + 2) * kGoldenGamma);
    const double u1 = (static_cast<double>(a >> 11) + 0.5) * 0x1p-53, u2 = static_cast<double>(b >> 11) * 0x1p-53;
    return weight_scale * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

namespace {
std::string number_text(double v) {  // %g: -1e-09 stays visible, where std::to_string says -0.000000
    char text[32];
    std::snprintf(text, sizeof text, "%g", v);
    return text;
}
}  // namespace

ClickLogTruth generate_click_log(const ClickLogSpec& spec, const std::string& path) {
    if (spec.rows < 1) throw InputError("make-clicklog: --rows must be at least 1 (got " + std::to_string(spec.rows) + ")");
    if (spec.format == SparseFormat::Criteo && (spec.hash_bits < 1 || spec.hash_bits > 24))
        throw InputError("make-clicklog: --hash-bits must be between 1 and 24 (got " + std::to_string(spec.hash_bits) + ")");
    if (spec.format == SparseFormat::Libsvm && (spec.features < 1 || spec.features > (int64_t{1} << 24)))
        throw InputError("make-clicklog: --features must be between 1 and 2^24 (got " + std::to_string(spec.features) + ")");
    if (!(spec.weight_scale >= 0) || !std::isfinite(spec.weight_scale))
        throw InputError("make-clicklog: --weight-scale must be a finite number >= 0 (got " + number_text(spec.weight_scale) + ")");
    if (!std::isfinite(spec.bias))
        throw InputError("make-clicklog: --bias must be a finite number (got " + number_text(spec.bias) + ")");
    if (!(spec.zipf_exponent > 0) || !std::isfinite(spec.zipf_exponent))
        throw InputError("make-clicklog: --zipf must be a finite number > 0 (got " + number_text(spec.zipf_exponent) + ")");

    ClickLogTruth truth;
    truth.spec = spec;
    const bool criteo = spec.format == SparseFormat::Criteo;
    std::unique_ptr<SparseLineParser> parser;
    if (criteo)
        parser = std::make_unique<CriteoLineParser>(spec.hash_bits, spec.criteo_integers);
    else
        parser = std::make_unique<LibsvmLineParser>(LibsvmOptions{1, spec.features, 2});
    truth.num_features = parser->num_features();
    std::vector<float> w(static_cast<size_t>(truth.num_features));
    for (size_t j = 0; j < w.size(); ++j)
        w[j] = static_cast<float>(click_log_true_weight(spec.model_seed, spec.weight_scale, j));

    std::vector<ZipfTable> zipf;
    if (criteo) {
        for (int c = kCriteoIntegerColumns + 1; c < kCriteoColumns; ++c) zipf.emplace_back(vocabulary(c), spec.zipf_exponent);
    } else {
        zipf.emplace_back(spec.features, spec.zipf_exponent);
    }
    Rng rng(mix64(spec.seed ^ 0x726f7773ULL));  // "rows"
    // The categorical values each column draws from belong to the model, not to the rows: a test file (another seed,
    // the same model seed) must hold the training file's values, or every categorical feature of it would be one the
    // trained model never saw. With seed = model seed, the files are those of before this was tied to the model.
    const uint64_t value_seed = mix64(spec.model_seed ^ 0x76616c756573ULL);  // "values"

    TextSink sink(path);
    std::string out, line;
    std::vector<int64_t> ids;
    CsrBatch row;
    double logloss = 0, expected = 0;
    for (int64_t i = 0; i < spec.rows; ++i) {
        line.assign(1, '0');  // label placeholder, set below
        if (criteo)
            criteo_fields(rng, value_seed, zipf, line);
        else
            libsvm_features(rng, zipf[0], spec.features, ids, line);
        row.clear();
        parser->parse(line, row);  // exactly the reader's features
        double z = spec.bias;
        for (int64_t k = 0; k < row.nnz(); ++k)
            z += static_cast<double>(w[row.indices[static_cast<size_t>(k)]]) * row.values[static_cast<size_t>(k)];
        const double p = 1.0 / (1.0 + std::exp(-z));
        const bool y = static_cast<double>(rng.next_u64() >> 11) * 0x1p-53 < p;
        line[0] = y ? '1' : '0';
        truth.positives += y;
        // log(sigmoid) in the stable form: -log p = log1p(e^-z), -log(1-p) = log1p(e^z).
        logloss += y ? std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
        expected += binary_entropy(p);
        out += line;
        out += '\n';
        if (out.size() > (1 << 20)) {
            sink.write(out);
            out.clear();
        }
    }
    sink.write(out);
    sink.close();
    const auto n = static_cast<double>(spec.rows);
    truth.true_logloss = logloss / n;
    truth.expected_logloss = expected / n;
    truth.constant_logloss = binary_entropy(static_cast<double>(truth.positives) / n);
    return truth;
}

nlohmann::json ClickLogTruth::to_json() const {
    const bool criteo = spec.format == SparseFormat::Criteo;
    nlohmann::json j;
    j["format"] = criteo ? "criteo" : "libsvm";
    j["rows"] = spec.rows;
    j["seed"] = spec.seed;
    j["model_seed"] = spec.model_seed;
    if (criteo) {
        j["hash_bits"] = spec.hash_bits;
        j["criteo_integers"] = spec.criteo_integers == CriteoIntegers::Log2 ? "log2" : "hash";
    } else {
        j["features"] = spec.features;
        j["index_base"] = 1;
    }
    j["num_features"] = num_features;
    j["bias"] = spec.bias;
    j["weight_scale"] = spec.weight_scale;
    j["weights"] =
        "w_j = weight_scale * z_j for every parsed feature id j (0-based), z_j = sqrt(-2 ln u1) cos(2 pi u2), "
        "u1 = ((a >> 11) + 0.5) / 2^53, u2 = (b >> 11) / 2^53, a = mix64(s + (2j+1)G), b = mix64(s + (2j+2)G), "
        "s = mix64(model_seed ^ 0x77656967687473), G = 0x9E3779B97F4A7C15, mix64 = SplitMix64's finaliser "
        "(ringtrain::data::click_log_true_weight)";
    j["label"] = "Bernoulli(sigmoid(bias + w . x)), x = the features the reader parses from the line";
    j["zipf_exponent"] = spec.zipf_exponent;
    j["positives"] = positives;
    j["positive_rate"] = static_cast<double>(positives) / static_cast<double>(spec.rows);
    j["true_logloss"] = true_logloss;
    j["expected_logloss"] = expected_logloss;
    j["constant_logloss"] = constant_logloss;
    return j;
}

}  // namespace ringtrain::data

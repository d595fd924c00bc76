// Small click-log files written at test time for the sparse path's tests: libsvm rows of one fixed byte length (so
// the readers' byte-range shares split exactly between rows), and Criteo-layout rows drawn from a known logistic
// model (so a test can compare the trained model's test log loss with the true model's).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "ringtrain/core/hash.hpp"

namespace rt_test {

struct SvmRow {
    int label = 0;
    std::vector<std::pair<int, float>> features;  // 1-based index, value; indices increasing
};

// "label idx:val ... #" padded with spaces to `width` bytes before the newline.
inline std::string svm_line(const SvmRow& r, size_t width = 72) {
    std::string s = std::to_string(r.label);
    char buf[32];
    for (const auto& [i, v] : r.features) {
        std::snprintf(buf, sizeof buf, " %d:%.3f", i, static_cast<double>(v));
        s += buf;
    }
    s += " #";
    if (s.size() < width) s.append(width - s.size(), ' ');
    return s + "\n";
}

inline void write_svm(const std::string& path, const std::vector<SvmRow>& rows) {
    std::ofstream out(path, std::ios::binary);
    for (const SvmRow& r : rows) out << svm_line(r);
}

// `count` rows over features 1..num_features with 1-4 features each (none when `empty`), labels from a fixed
// rule plus noise; deterministic in `seed`.
inline std::vector<SvmRow> svm_rows(int count, int num_features, uint64_t seed, bool empty = false) {
    std::vector<SvmRow> rows;
    uint64_t s = seed;
    for (int r = 0; r < count; ++r) {
        SvmRow row;
        const int k = empty ? 0 : 1 + static_cast<int>(ringtrain::splitmix64_next(s) % 4);
        std::vector<int> idx;
        for (int j = 0; j < k; ++j) {
            const int i = 1 + static_cast<int>(ringtrain::splitmix64_next(s) % static_cast<uint64_t>(num_features));
            bool seen = false;
            for (int x : idx) seen = seen || x == i;
            if (!seen) idx.push_back(i);
        }
        std::sort(idx.begin(), idx.end());
        double score = 0;
        for (int i : idx) {
            const float v = 0.25f + 0.25f * static_cast<float>(ringtrain::splitmix64_next(s) % 4);
            row.features.push_back({i, v});
            score += (i % 3 == 0 ? 1.5 : -0.7) * v;
        }
        row.label = (score + 0.3 * (static_cast<double>(ringtrain::splitmix64_next(s) % 1000) / 500.0 - 1.0)) > 0 ? 1 : 0;
        rows.push_back(std::move(row));
    }
    return rows;
}

// Criteo Display Advertising layout: label, I1..I13 (counts), C1..C26 (8 hex digits), tab-separated, empty =
// missing. The true model: click probability sigmoid(bias + sum over present categorical fields of w(column,
// value)), values Zipf-like over 11 per column, about 10% of fields missing; integers are noise. Returns the true
// model's mean log loss over the rows written.
inline double write_criteo(const std::string& path, int count, uint64_t seed) {
    std::ofstream out(path, std::ios::binary);
    uint64_t s = seed;
    auto uniform = [&] { return static_cast<double>(ringtrain::splitmix64_next(s) >> 11) * 0x1.0p-53; };
    auto weight = [](int column, int value) {  // a fixed function of (column, value): the true weights
        const uint64_t h = ringtrain::mix64(static_cast<uint64_t>(column) * 1000003u + static_cast<uint64_t>(value));
        return (static_cast<double>(h >> 11) * 0x1.0p-53 - 0.5) * 1.6;
    };
    const double bias = -1.0;
    double loss = 0;
    for (int r = 0; r < count; ++r) {
        std::string fields;
        double z = bias;
        for (int i = 0; i < 13; ++i) {
            fields += '\t';
            if (uniform() < 0.1) continue;
            fields += std::to_string(static_cast<int>(std::floor(std::exp(uniform() * 3.0))) - 1);
        }
        for (int c = 0; c < 26; ++c) {
            fields += '\t';
            if (uniform() < 0.1) continue;
            const int value = static_cast<int>(std::floor(std::pow(12.0, uniform())));  // 1..11, small ones frequent
            char hex[16];
            std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(ringtrain::mix64(c * 131u + value) & 0xffffffffu));
            fields += hex;
            z += weight(c, value);
        }
        const double p = 1.0 / (1.0 + std::exp(-z));
        const int label = uniform() < p ? 1 : 0;
        loss -= label ? std::log(p) : std::log(1.0 - p);
        out << label << fields << "\n";
    }
    return loss / count;
}

}  // namespace rt_test

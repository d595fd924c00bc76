// The libsvm line parser alone: a file read into memory, split at '\n', parsed in batches of 256 rows into one
// reused CsrBatch, as the training thread does. Prints MB/s, rows/s and ns per feature, best of --repeat passes.
// Usage: bench_libsvm_parse FILE [--repeat R] [--features F]
// Results: bench/RESULTS.md, "The libsvm fast path without a dependent load chain".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "ringtrain/data/sparse_libsvm.hpp"

int main(int argc, char** argv) {
    if (argc < 2) {
        std::cerr << "usage: bench_libsvm_parse FILE [--repeat R] [--features F]\n";
        return 2;
    }
    int repeat = 5;
    int64_t features = 1 << 20;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::atoi(argv[i + 1]);
        else if (std::strcmp(argv[i], "--features") == 0) features = std::atoll(argv[i + 1]);
        else {
            std::cerr << "bench_libsvm_parse: unknown argument " << argv[i] << "\n";
            return 2;
        }
    }
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) {
        std::cerr << "bench_libsvm_parse: cannot open " << argv[1] << "\n";
        return 2;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    ringtrain::data::LibsvmLineParser parser({.index_base = 1, .num_features = features, .num_classes = 0});
    ringtrain::CsrBatch batch;
    double best = 1e30;
    int64_t rows = 0, nnz = 0;
    for (int r = 0; r < repeat; ++r) {
        rows = nnz = 0;
        batch.clear();
        const auto t0 = std::chrono::steady_clock::now();
        for (size_t p = 0; p < text.size();) {
            const char* nl = static_cast<const char*>(std::memchr(text.data() + p, '\n', text.size() - p));
            const size_t end = nl ? static_cast<size_t>(nl - text.data()) : text.size();
            if (parser.parse(std::string_view(text.data() + p, end - p), batch) && batch.rows() == 256) {
                rows += batch.rows();
                nnz += batch.nnz();
                batch.clear();
            }
            p = end + 1;
        }
        rows += batch.rows();
        nnz += batch.nnz();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%s: %.1f MB, %lld rows, %lld features; best of %d: %.1f MB/s, %.2f M rows/s, %.2f ns/feature\n",
                argv[1], static_cast<double>(text.size()) / 1e6, static_cast<long long>(rows),
                static_cast<long long>(nnz), repeat, static_cast<double>(text.size()) / best / 1e6,
                static_cast<double>(rows) / best / 1e6, best * 1e9 / static_cast<double>(nnz));
    return 0;
}

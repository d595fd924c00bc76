// Standalone driver for the fuzz targets, for compilers without libFuzzer (CI builds with g++): replays the seeds,
// then mutates them (byte flips, inserted and deleted runs, splices of two seeds, interesting numbers) with a fixed
// seed for a bounded time. Not coverage-guided like libFuzzer, but it runs everywhere, in seconds, and is
// reproducible: a failing input is written to the working directory and its iteration printed.
// Usage: fuzz_X [--seconds S] [--seed N] [--write-seeds DIR] [FILE...]   (FILEs are replayed, nothing else is run)
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <typeinfo>

#include "fuzz_target.hpp"

namespace {

std::string mutate(const std::vector<std::string>& seeds, std::mt19937_64& rng) {
    std::string s = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 8);
    static const char* const interesting[] = {"0", "-1", "1e400", "-0", "2147483648", "18446744073709551615",
                                              "9223372036854775808", "null", "[]", "{}", "\"\"", "1e-400", "NaN",
                                              "[[[[[[[[[[[[[[[[", "\xff\xfe", "4294967295"};
    for (int e = 0; e < edits; ++e) {
        const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
        switch (rng() % 7) {
            case 0:  // flip a bit
                if (!s.empty()) s[at % s.size()] = static_cast<char>(s[at % s.size()] ^ (1u << (rng() % 8)));
                break;
            case 1:  // delete a run
                if (!s.empty()) s.erase(at % s.size(), 1 + rng() % 16);
                break;
            case 2:  // insert random bytes
                for (size_t k = 0, n = 1 + rng() % 8; k < n; ++k) s.insert(s.begin() + static_cast<long>(at), static_cast<char>(rng()));
                break;
            case 3:  // an interesting token
                s.insert(at, interesting[rng() % (sizeof interesting / sizeof *interesting)]);
                break;
            case 4: {  // splice in part of another seed
                const std::string& o = seeds[rng() % seeds.size()];
                if (!o.empty()) {
                    const size_t from = rng() % o.size();
                    s.insert(at, o.substr(from, 1 + rng() % 64));
                }
                break;
            }
            case 5:  // truncate
                s.resize(at);
                break;
            case 6:  // overwrite 4 bytes with a random word (sizes and counts in binary formats)
                if (s.size() >= 4) {
                    const uint32_t w = static_cast<uint32_t>(rng());
                    std::memcpy(&s[at % (s.size() - 3)], &w, 4);
                }
                break;
        }
    }
    return s;
}

int run_one(const std::string& input, const char* what) {
    try {
        LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
        return 0;
    } catch (const std::exception& e) {
        const std::string crash = "fuzz-failure-" + std::to_string(::getpid()) + ".bin";
        std::ofstream(crash, std::ios::binary).write(input.data(), static_cast<std::streamsize>(input.size()));
        std::cerr << "fuzz: " << what << ": not an InputError but " << typeid(e).name() << ": " << e.what()
                  << "\n  input saved to " << crash << "\n";
        return 1;
    }
}

}  // namespace

int main(int argc, char** argv) {
    // An input that makes a reader allocate without bound must fail here as std::bad_alloc (reported with the input),
    // not be granted by overcommit and end the CI machine's run in the OOM killer. Sanitizers reserve terabytes of
    // shadow address space, so under them the cap is their own (scripts/sanitize.sh: max_allocation_size_mb).
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    const rlimit as_limit{rlim_t{4} << 30, rlim_t{4} << 30};
    setrlimit(RLIMIT_AS, &as_limit);
#endif
    double seconds = 5;
    uint64_t seed = 1;
    std::vector<std::string> files;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--seconds" && i + 1 < argc) {
            seconds = std::atof(argv[++i]);
        } else if (a == "--seed" && i + 1 < argc) {
            seed = std::strtoull(argv[++i], nullptr, 10);
        } else if (a == "--write-seeds" && i + 1 < argc) {
            const std::filesystem::path dir = argv[++i];
            std::filesystem::create_directories(dir);
            const auto seeds = ringtrain_fuzz_seeds();
            for (size_t k = 0; k < seeds.size(); ++k)
                std::ofstream(dir / ("seed-" + std::to_string(k)), std::ios::binary) << seeds[k];
            std::cout << seeds.size() << " seeds written to " << dir << "\n";
            return 0;
        } else {
            files.push_back(a);
        }
    }
    if (!files.empty()) {
        int failed = 0;
        for (const auto& f : files) failed += run_one(rt_fuzz::read_text(f), f.c_str());
        return failed ? 1 : 0;
    }
    const std::vector<std::string> seeds = ringtrain_fuzz_seeds();
    for (size_t k = 0; k < seeds.size(); ++k)
        if (run_one(seeds[k], ("seed " + std::to_string(k)).c_str())) return 1;
    std::mt19937_64 rng(seed);
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t n = 0;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
        ++n;
        if (run_one(mutate(seeds, rng), ("mutation " + std::to_string(n) + " (--seed " + std::to_string(seed) + ")").c_str()))
            return 1;
    }
    std::cout << "fuzz: " << seeds.size() << " seeds and " << n << " mutations in " << seconds
              << " s: every input ended in success or an InputError\n";
    return 0;
}

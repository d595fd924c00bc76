// Fuzz target: the IDX reader (plain and gzip; magic, type code, dimensions, payload size).
#include <zlib.h>

#include "fuzz_target.hpp"
#include "ringtrain/data/idx.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = rt_fuzz::as_file(data, size, "-data.idx");
    return rt_fuzz::expect_clean([&] { (void)ringtrain::data::read_idx_file(path); });
}

namespace {
std::string idx(const std::vector<uint32_t>& dims) {
    std::string s = {0, 0, 8, static_cast<char>(dims.size())};
    size_t n = 1;
    for (uint32_t d : dims) {
        for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>(d >> shift));
        n *= d;
    }
    for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i * 7));
    return s;
}
std::string gzip(const std::string& raw) {
    std::string path = (std::filesystem::temp_directory_path() / "ringtrain-fuzz-seed.gz").string();
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, raw.data(), static_cast<unsigned>(raw.size()));
    gzclose(f);
    std::string out = rt_fuzz::read_text(path);
    std::filesystem::remove(path);
    return out;
}
}  // namespace

std::vector<std::string> ringtrain_fuzz_seeds() {
    return {idx({5}), idx({3, 4, 4}), idx({2, 1, 3, 3}), gzip(idx({4, 2, 2})), gzip(idx({6}))};
}

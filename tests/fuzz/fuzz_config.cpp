// Fuzz target: the experiment config (JSON text, schema, defaults) and `--set` overrides.
#include "fuzz_target.hpp"
#include "ringtrain/train/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // The first line, when it starts with "--set ", is an override; the rest is the config file.
    std::string text(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> overrides;
    if (text.rfind("--set ", 0) == 0) {
        const size_t eol = text.find('\n');
        overrides.push_back(text.substr(6, eol == std::string::npos ? std::string::npos : eol - 6));
        text.erase(0, eol == std::string::npos ? text.size() : eol + 1);
    }
    const std::string path =
        rt_fuzz::as_file(reinterpret_cast<const uint8_t*>(text.data()), text.size(), "-config.json");
    return rt_fuzz::expect_clean([&] { (void)ringtrain::train::Config::load(path, overrides); });
}

std::vector<std::string> ringtrain_fuzz_seeds() {
    std::vector<std::string> seeds;
    for (const auto& e : std::filesystem::directory_iterator(RINGTRAIN_SOURCE_DIR "/configs"))
        if (e.path().extension() == ".json") seeds.push_back(rt_fuzz::read_text(e.path().string()));
    seeds.push_back("--set train.batch_size=32\n" + seeds.front());
    seeds.push_back("--set sync.compression=fp16\n{\"model\": \"models/logreg.json\"}");
    return seeds;
}

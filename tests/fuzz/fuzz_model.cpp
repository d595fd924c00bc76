// Fuzz target: the model architecture JSON (layer list, registry, per-layer keys, shapes).
#include "fuzz_target.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/nn/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = rt_fuzz::as_file(data, size, "-model.json");
    return rt_fuzz::expect_clean([&] {
        ringtrain::Rng rng(1);
        (void)ringtrain::nn::Model::from_file(path, {1, 28, 28}, rng);
    });
}

std::vector<std::string> ringtrain_fuzz_seeds() {
    std::vector<std::string> seeds;
    for (const auto& e : std::filesystem::directory_iterator(RINGTRAIN_SOURCE_DIR "/models"))
        if (e.path().extension() == ".json") seeds.push_back(rt_fuzz::read_text(e.path().string()));
    return seeds;
}

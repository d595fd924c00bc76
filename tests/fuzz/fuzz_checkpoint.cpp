// Fuzz target: the checkpoint loader (JSON header, tensor table, payload) against a fixed small model with
// optimizer state, as `ringtrain train --set checkpoint.resume=...` and `ringtrain eval` load it, local SGD's
// per-rank copies included.
#include "fuzz_target.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/train/checkpoint.hpp"

namespace {
struct Fixture {
    ringtrain::Rng rng{3};
    ringtrain::nn::Model model = ringtrain::nn::Model::from_file(RINGTRAIN_SOURCE_DIR "/models/logreg.json", {1, 28, 28}, rng);
    std::unique_ptr<ringtrain::optim::Optimizer> opt = [this] {
        ringtrain::optim::OptimizerOptions o;
        o.name = "sgd";
        o.momentum = 0.9f;
        return ringtrain::optim::make_optimizer(o, model.parameters());
    }();
};
Fixture& fixture() {
    static Fixture f;
    return f;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = rt_fuzz::as_file(data, size, "-ckpt.bin");
    Fixture& f = fixture();
    ringtrain::train::RankCopies copies;
    return rt_fuzz::expect_clean(
        [&] { (void)ringtrain::train::load_checkpoint(path, f.model.parameters(), f.opt.get(), &copies); });
}

std::vector<std::string> ringtrain_fuzz_seeds() {
    Fixture& f = fixture();
    const std::string path = (std::filesystem::temp_directory_path() / "ringtrain-fuzz-seed.ckpt").string();
    ringtrain::train::LoopState st;
    st.epoch = 1;
    st.step_in_epoch = 3;
    st.global_step = 303;
    st.rng_states = {ringtrain::Rng(5).state()};
    ringtrain::train::save_checkpoint(path, f.model.parameters(), f.opt.get(), st);
    std::string bytes = rt_fuzz::read_text(path);
    // A local SGD checkpoint of two ranks (a position that verifies): every tensor again per rank.
    st.steps_per_epoch = 300;
    st.world_size = 2;
    st.rng_states.push_back(ringtrain::Rng(6).state());
    ringtrain::train::record_last_average_step(st, 300);
    ringtrain::train::RankCopies copies{2, {}};
    for (const auto* p : f.model.parameters())
        copies.values.emplace_back(2 * static_cast<size_t>(p->value.numel()), 0.5f);
    for (const auto& [name, t] : f.opt->state()) copies.values.emplace_back(2 * static_cast<size_t>(t->numel()), 0.25f);
    ringtrain::train::save_checkpoint(path, f.model.parameters(), f.opt.get(), st, copies);
    std::string with_copies = rt_fuzz::read_text(path);
    std::filesystem::remove(path);
    return {bytes, with_copies};
}

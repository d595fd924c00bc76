// RunPlan: every config value parsed once into typed fields, and a canonical form whose digest ranks can compare.
#include <catch2/catch.hpp>

#include "config_schema.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/optim/schedule.hpp"
#include "ringtrain/train/config.hpp"

using namespace ringtrain::train;
using nlohmann::json;

namespace {

const json kBase = {{"model", "models/logreg.json"}, {"data", {{"format", "synthetic"}, {"synthetic_shape", {784}}}}};
// The image keys, which synthetic data refuses (it would ignore them), change on an image folder's plan; its random
// resized crop is on, so that either scale can change and stay a valid range.
const json kFolderBase = {{"model", "models/quality_cnn.json"},
                          {"data",
                           {{"format", "image_folder"},
                            {"train_dir", "a"},
                            {"test_dir", "b"},
                            {"image_size", {64, 64}},
                            {"augment", {{"random_resized_crop", {0.5, 1.0}}}}}}};

uint64_t digest_of(const json& doc) { return Config::from_json(doc, "test").plan().digest(); }

// A different value for a leaf that the schema still accepts.
json changed(const std::string& pointer, const json& v, const json& base) {
    if (v.is_boolean()) return !v.get<bool>();
    if (pointer == "/data/channels") return 4 - v.get<int64_t>();  // 3 <-> 1 (2 is not a channel count)
    if (v.is_number_integer()) return pointer == "/data/index_base" ? 1 - v.get<int64_t>() : v.get<int64_t>() + 1;
    if (v.is_number_float()) return v.get<double>() == 0.0 ? 0.25 : v.get<double>() * 0.5;
    if (v.is_null()) return 0.001;
    // Strings: a spelling of another choice where the key has choices; any other text for free strings.
    for (const char* s : {"cpu", "synthetic", "idx", "adam", "sqrt", "cosine", "mpi", "fp16", "local_sgd", "lines", "hash",
                          "allgather", "none", "im2col", "replicated", "speed", "bf16"}) {
        if (v == s) continue;
        json doc = base;
        doc[json::json_pointer(pointer)] = s;
        try {
            Config::from_json(doc, "test");
            return s;
        } catch (const ringtrain::InputError&) {
        }
    }
    return v.get<std::string>() + "x";
}

}  // namespace

TEST_CASE("the plan's canonical form holds every config value under its key", "[train][config]") {
    const Config defaults = Config::from_json(kBase, "test");
    CHECK(defaults.plan().to_json() == defaults.document());
    const Config set = Config::from_json(kBase, "test",
                                         {"optimizer.name=adam", "optimizer.eps=1e-7", "checkpoint.resume=auto", "sync.mode=local_sgd",
                                          "sync.local_sgd_period=3", "data.format=idx", "data.mean=0.5",
                                          "output.timeline=t.json"});
    CHECK(set.plan().to_json() == set.document());
    const Config compressed = Config::from_json(kBase, "test", {"sync.compression=bf16"});
    CHECK(compressed.plan().to_json() == compressed.document());
}

TEST_CASE("the plan's values are typed: enums, optionals, the resume choice", "[train][config]") {
    const Config c = Config::from_json(
        kBase, "test",
        {"device=cpu", "sync.backend=mpi", "sync.mode=local_sgd", "optimizer.name=adadelta",
         "optimizer.schedule=step", "output.progress=none", "checkpoint.resume=runs/x/ckpt.bin", "train.threads=3",
         "train.cpu_conv=im2col", "train.cpu_precision=bf16"});
    const RunPlan& p = c.plan();
    CHECK(p.device == DeviceChoice::Cpu);
    CHECK(p.data.format == DataFormat::Synthetic);
    CHECK(p.sync.backend == Backend::Mpi);
    CHECK(p.sync.mode == SyncMode::LocalSgd);
    CHECK(Config::from_json(kBase, "test", {"sync.compression=fp16"}).plan().sync.compression == Compression::Fp16);
    CHECK(p.optimizer.name == OptimizerName::Adadelta);
    CHECK(p.optimizer.schedule == Schedule::Step);
    CHECK(p.output.progress == ProgressMode::None);
    CHECK(p.checkpoint.resume.kind == ResumeFrom::Path);
    CHECK(p.checkpoint.resume.path == "runs/x/ckpt.bin");
    CHECK(p.train.threads == 3);
    CHECK(p.train.cpu_conv == ringtrain::ops::CpuConv::Im2col);
    CHECK(Config::from_json(kBase, "test").plan().train.cpu_conv == ringtrain::ops::CpuConv::Auto);
    CHECK(p.train.cpu_precision == ringtrain::ops::CpuPrecision::Bf16);
    CHECK(Config::from_json(kBase, "test").plan().train.cpu_precision == ringtrain::ops::CpuPrecision::Fp32);
    CHECK(p.data.synthetic_shape == std::vector<int64_t>{784});
    CHECK_FALSE(p.optimizer.eps.has_value());
    CHECK(p.optimizer.resolved_eps() == 1e-6);  // Adadelta's default
    CHECK_FALSE(p.optimizer.warmup_start_lr.has_value());
    CHECK(Config::from_json(kBase, "test").plan().optimizer.resolved_eps() == 1e-8);
    CHECK(Config::from_json(kBase, "test", {"optimizer.name=adam", "optimizer.eps=0.5"}).plan().optimizer.resolved_eps() ==
          0.5);
    CHECK(Config::from_json(kBase, "test", {"checkpoint.resume=auto"}).plan().checkpoint.resume.kind ==
          ResumeFrom::Latest);
    CHECK(Config::from_json(kBase, "test").plan().checkpoint.resume.kind == ResumeFrom::Fresh);
    CHECK(std::string(to_string(SyncMode::LocalSgd)) == "local_sgd");
}

TEST_CASE("equal configs give equal digests, however they are written", "[train][config]") {
    const uint64_t d = digest_of(kBase);
    CHECK(digest_of(kBase) == d);
    // Defaults written out, a key given where the default would do, an integer where a number is expected.
    CHECK(Config::from_json(kBase, "test").plan().digest() ==
          Config::from_json(Config::from_json(kBase, "test").document(), "test").plan().digest());
    json explicit_default = kBase;
    explicit_default["optimizer"]["lr"] = 0.01;
    explicit_default["data"]["mean"] = 0;
    CHECK(digest_of(explicit_default) == d);
}

namespace {

// Plans under which the keys that kBase's plan never reads (and so refuses) are read: image folders, the sparse
// formats and their optimizers, the other dense optimizers and schedules, warmup, IDX data.
std::vector<json> plans_reading_every_key() {
    const json sparse = {{"model", "models/sparse_logreg.json"},
                         {"data", {{"format", "criteo"}, {"train_file", "a"}, {"test_file", "b"}}},
                         {"optimizer", {{"name", "ftrl"}}}};
    json libsvm = sparse;
    libsvm["data"]["format"] = "libsvm";
    libsvm["optimizer"]["name"] = "adagrad";
    std::vector<json> plans{kFolderBase, sparse, libsvm};
    for (const auto& [key, value] : {std::pair<const char*, const char*>{"name", "adam"}, {"name", "adadelta"},
                                     {"schedule", "step"}, {"schedule", "cosine"}}) {
        json doc = kBase;
        doc["optimizer"][key] = value;
        plans.push_back(doc);
    }
    json warm = kBase;
    warm["optimizer"]["warmup_epochs"] = 1.0;
    json idx = {{"model", "models/logreg.json"}, {"data", {{"format", "idx"}}}};
    plans.push_back(warm);
    plans.push_back(idx);
    return plans;
}

}  // namespace

TEST_CASE("changing any config key changes the digest", "[train][config]") {
    const json full = Config::from_json(kBase, "test").document();
    const uint64_t d = digest_of(full);
    int keys = 0, elsewhere = 0;
    const json leaves = full.flatten();
    for (const auto& leaf : leaves.items()) {
        const std::string& pointer = leaf.key();
        const json& value = leaf.value();
        INFO(pointer << ": " << value.dump());
        json doc = full;
        doc[json::json_pointer(pointer)] = changed(pointer, value, kBase);
        if (pointer == "/sync/local_sgd_period") doc["sync"]["mode"] = "local_sgd";  // refused without it
        REQUIRE(doc != full);
        bool refused = false;  // a key kBase's plan does not read: its plan refuses it
        uint64_t digest = 0;
        try {
            digest = digest_of(doc);
        } catch (const ringtrain::InputError&) {
            refused = true;
        }
        if (!refused) {
            CHECK(digest != d);
        } else {
            // Under some plan that reads it, the key changes that plan's digest.
            bool changes_a_digest = false;
            for (const json& plan : plans_reading_every_key()) {
                const json base = Config::from_json(plan, "test").document();
                json other = base;
                other[json::json_pointer(pointer)] = changed(pointer, base[json::json_pointer(pointer)], plan);
                try {
                    changes_a_digest = digest_of(other) != digest_of(base);
                } catch (const ringtrain::InputError&) {
                    continue;
                }
                if (changes_a_digest) break;
            }
            CHECK(changes_a_digest);
            ++elsewhere;
        }
        ++keys;
    }
    // The image keys, the sparse keys, the other optimizers' and schedules' keys, ...
    CHECK(elsewhere >= 30);
    CHECK(keys >= 55);  // every schema key (the synthetic shape has one entry here)
}

TEST_CASE("schedule_options carries every schedule key of the plan", "[train][config]") {
    const RunPlan p = Config::from_json(kBase, "test",
                                        {"optimizer.lr=0.2", "optimizer.lr_scaling=sqrt", "optimizer.schedule=step",
                                         "optimizer.warmup_epochs=2", "optimizer.warmup_start_lr=0.01",
                                         "optimizer.step_epochs=3", "optimizer.gamma=0.5", "train.epochs=7"})
                          .plan();
    const ringtrain::optim::ScheduleOptions s = schedule_options(p);
    CHECK(s.lr == 0.2f);
    CHECK(s.scaling == "sqrt");
    CHECK(s.decay == "step");
    CHECK(s.warmup_epochs == 2.0);
    CHECK(s.warmup_start_lr == 0.01);
    CHECK(s.step_epochs == 3.0);
    CHECK(s.gamma == 0.5);
    CHECK(s.total_epochs == 7.0);
    // The cosine schedule's key, under the cosine schedule (the step schedule refuses it: it would not read it).
    const RunPlan cosine = Config::from_json(kBase, "test", {"optimizer.schedule=cosine", "optimizer.min_lr_factor=0.25"})
                               .plan();
    CHECK(schedule_options(cosine).min_lr_factor == 0.25);
    CHECK(schedule_options(Config::from_json(kBase, "test").plan()).warmup_start_lr == -1.0);  // unset: the lr
}

TEST_CASE("train.stop_grace_s has a ceiling (the watchdog's deadline must fit a time_t)", "[train][config]") {
    using Catch::Matchers::Contains;
    CHECK_THROWS_WITH(Config::from_json(kBase, "test", {"train.stop_grace_s=1e300"}),
                      Contains("train.stop_grace_s:") && Contains("is out of range"));
    CHECK(Config::from_json(kBase, "test", {"train.stop_grace_s=1000000"}).plan().train.stop_grace_s == 1e6);
}

TEST_CASE("a key in two schema rows is an error, not a row silently dropped", "[train][config]") {
    using namespace ringtrain::train::detail;
    using Catch::Matchers::Contains;
    const KeyRows a = {{"train.x", KeySpec{.kind = Kind::Int}}};
    const KeyRows b = {{"train.y", KeySpec{.kind = Kind::Bool}}, {"train.x", KeySpec{.kind = Kind::String}}};
    CHECK(schema_of({a}).size() == 1);
    CHECK_THROWS_WITH(schema_of({a, b}), Contains("config key 'train.x' is in the schema twice"));
    CHECK_NOTHROW(schema());
}

// Keys the chosen format, optimizer, schedule or sync settings never read: refused naming the key and where it came
// from, accepted where the plan reads them, and a note (not a refusal) where a --set changed what decides their use.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/train/config.hpp"

using ringtrain::InputError;
using ringtrain::train::Config;
using nlohmann::json;
using Catch::Matchers::Contains;

namespace {

const json kDense = {{"model", "models/logreg.json"}, {"data", {{"format", "synthetic"}, {"synthetic_shape", {784}}}}};
const json kSparse = {{"model", "models/sparse_logreg.json"},
                      {"data", {{"format", "libsvm"}, {"train_file", "a.txt"}, {"test_file", "b.txt"}}},
                      {"optimizer", {{"name", "adagrad"}}}};

// The document with `key` (dotted) set to `value`.
json with(json doc, const std::string& key, const json& value) {
    std::string ptr = "/" + key;
    for (char& c : ptr)
        if (c == '.') c = '/';
    doc[json::json_pointer(ptr)] = value;
    return doc;
}

std::string refusal(const json& doc, const std::vector<std::string>& sets = {}) {
    try {
        Config::from_json(doc, "cfg.json", sets);
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

struct Case {
    const char* key;
    json value;
    json unused_base;     // a plan that never reads the key
    const char* context;  // the setting the refusal names
    json used_base;       // a plan that reads it
};

std::vector<Case> cases() {
    const json idx = {{"model", "models/logreg.json"}, {"data", {{"format", "idx"}}}};
    const json criteo = with(with(kSparse, "data.format", "criteo"), "optimizer.name", "adagrad");
    const json ftrl = with(kSparse, "optimizer.name", "ftrl");
    const json adam = with(kDense, "optimizer.name", "adam");
    const json adadelta = with(kDense, "optimizer.name", "adadelta");
    const json local = with(kDense, "sync.mode", "local_sgd");
    const json sparse_local = with(kSparse, "sync.mode", "local_sgd");
    const json step = with(kDense, "optimizer.schedule", "step");
    const json cosine = with(kDense, "optimizer.schedule", "cosine");
    const json warm = with(kDense, "optimizer.warmup_epochs", 1.0);
    const json no_overlap = with(kDense, "sync.overlap", false);
    const json unfused = with(kDense, "sync.fusion_bytes", 0);
    const json untimed = with(kDense, "sync.cycle_time_ms", 0.0);
    const json folder = {{"model", "models/quality_cnn.json"},
                         {"data", {{"format", "image_folder"}, {"train_dir", "a"}, {"test_dir", "b"},
                                   {"image_size", {64, 64}}}}};
    return {
        {"data.mean", 0.5, kDense, "data.format 'synthetic'", idx},
        {"data.std", json::array({0.5, 0.5, 0.5}), kSparse, "data.format 'libsvm'", folder},
        {"data.train_dir", "x", idx, "data.format 'idx'", folder},
        {"data.skip_bad_files", true, kDense, "data.format 'synthetic'", folder},
        {"data.image_size", json::array({32, 32}), idx, "data.format 'idx'", folder},
        {"data.channels", 1, kDense, "data.format 'synthetic'", folder},
        {"data.augment.hflip", true, idx, "data.format 'idx'", folder},
        {"data.augment.random_crop_padding", 4, kSparse, "data.format 'libsvm'", folder},
        {"data.cache", true, idx, "data.format 'idx'", folder},
        {"sync.local_sgd_period", 3, kDense, "sync.mode 'allreduce'", local},
        {"optimizer.momentum", 0.9, with(kSparse, "optimizer.name", "sgd"), "data.format 'libsvm'", kDense},
        {"optimizer.weight_decay", 0.1, kSparse, "data.format 'libsvm'", kDense},
        {"optimizer.warmup_epochs", 1.0, kSparse, "data.format 'libsvm'", kDense},
        {"sync.compression", "fp16", local, "sync.mode 'local_sgd'", kDense},
        {"sync.balance", "speed", local, "sync.mode 'local_sgd'", kDense},
        {"sync.backward_passes_per_step", 2, kSparse, "data.format 'libsvm'", kDense},
        {"train.cpu_precision", "bf16", kSparse, "data.format 'libsvm'", kDense},
        {"train.cpu_conv", "im2col", with(kDense, "device", "cuda"), "device 'cuda'", kDense},
        {"output.timeline", "t.json", kSparse, "data.format 'libsvm'", kDense},
        {"data.dir", "/elsewhere", kDense, "data.format 'synthetic'", idx},
        {"data.dir", "/elsewhere", kSparse, "data.format 'libsvm'", idx},
        {"data.synthetic_train_size", 100, idx, "data.format 'idx'", kDense},
        {"data.synthetic_test_size", 100, kSparse, "data.format 'libsvm'", kDense},
        {"data.synthetic_shape", json::array({1, 8, 8}), idx, "data.format 'idx'", kDense},
        {"data.synthetic_classes", 3, idx, "data.format 'idx'", kDense},
        {"data.train_file", "x.txt", kDense, "data.format 'synthetic'", kSparse},
        {"data.test_file", "x.txt", idx, "data.format 'idx'", kSparse},
        {"data.shuffle_buffer", 100, kDense, "data.format 'synthetic'", kSparse},
        {"data.index_base", 0, criteo, "data.format 'criteo'", kSparse},
        {"data.num_features", 100, kDense, "data.format 'synthetic'", kSparse},
        {"data.hash_bits", 10, kSparse, "data.format 'libsvm'", criteo},
        {"data.criteo_integers", "hash", kDense, "data.format 'synthetic'", criteo},
        {"data.workers", 2, kSparse, "data.format 'libsvm'", kDense},
        {"data.prefetch", false, kSparse, "data.format 'libsvm'", kDense},
        {"train.threads", 2, kSparse, "data.format 'libsvm'", kDense},
        {"train.cpu_conv", "im2col", kSparse, "data.format 'libsvm'", kDense},
        {"train.profile_layers", true, kSparse, "data.format 'libsvm'", kDense},
        {"sync.batchnorm", true, kSparse, "data.format 'libsvm'", kDense},
        {"sync.fusion_bytes", 1024, kSparse, "data.format 'libsvm'", kDense},
        {"sync.sparse", "dense", kDense, "data.format 'synthetic'", kSparse},
        {"sync.sparse", "dense", sparse_local, "sync.mode 'local_sgd'", kSparse},
        {"sync.sparse_update", "replicated", kDense, "data.format 'synthetic'", kSparse},
        {"sync.sparse_update", "replicated", sparse_local, "sync.mode 'local_sgd'", kSparse},
        {"sync.overlap", false, local, "sync.mode 'local_sgd'", kDense},
        {"sync.overlap", false, kSparse, "data.format 'libsvm'", kDense},
        {"sync.cycle_time_ms", 5.0, no_overlap, "sync.overlap false", kDense},
        {"sync.cycle_time_ms", 5.0, unfused, "sync.fusion_bytes 0", kDense},
        {"sync.cycle_time_ms", 5.0, local, "sync.mode 'local_sgd'", kDense},
        {"sync.min_bucket_bytes", 5, untimed, "sync.cycle_time_ms 0", kDense},
        {"sync.min_bucket_bytes", 5, no_overlap, "sync.overlap false", kDense},
        {"optimizer.momentum", 0.9, adam, "optimizer.name 'adam'", kDense},
        {"optimizer.nesterov", true, adadelta, "optimizer.name 'adadelta'", with(kDense, "optimizer.momentum", 0.9)},
        {"optimizer.beta1", 0.8, kDense, "optimizer.name 'sgd'", adam},
        {"optimizer.beta2", 0.99, adadelta, "optimizer.name 'adadelta'", adam},
        {"optimizer.rho", 0.95, adam, "optimizer.name 'adam'", adadelta},
        {"optimizer.eps", 1e-7, kDense, "optimizer.name 'sgd'", adam},
        {"optimizer.eps", 1e-7, ftrl, "optimizer.name 'ftrl'", kSparse},
        {"optimizer.l1", 1.0, kSparse, "optimizer.name 'adagrad'", ftrl},
        {"optimizer.l2", 1.0, kDense, "optimizer.name 'sgd'", ftrl},
        {"optimizer.beta", 2.0, kSparse, "optimizer.name 'adagrad'", ftrl},
        {"optimizer.initial_accumulator", 0.1, ftrl, "optimizer.name 'ftrl'", kSparse},
        {"optimizer.step_epochs", 3.0, kDense, "optimizer.schedule 'constant'", step},
        {"optimizer.gamma", 0.5, cosine, "optimizer.schedule 'cosine'", step},
        {"optimizer.min_lr_factor", 0.5, step, "optimizer.schedule 'step'", cosine},
        {"optimizer.warmup_start_lr", 0.001, kDense, "optimizer.warmup_epochs 0", warm},
    };
}

}  // namespace

TEST_CASE("a key the plan never reads is refused from the file and from --set, and accepted where it is read",
          "[train][config]") {
    for (const Case& c : cases()) {
        INFO(c.key << " = " << c.value.dump() << " under " << c.context);
        // From the file: the file is named, with the key and the setting that leaves it unread.
        const std::string from_file = refusal(with(c.unused_base, c.key, c.value));
        CHECK_THAT(from_file, Contains("cfg.json: " + std::string(c.key) + ": not used with " + c.context));
        // From --set: the --set is named, not the file.
        const std::string from_set = refusal(c.unused_base, {std::string(c.key) + "=" +
                                                             (c.value.is_string() ? c.value.get<std::string>()
                                                                                  : c.value.dump())});
        CHECK_THAT(from_set, Contains("--set " + std::string(c.key) + "=") && Contains("not used with"));
        // Where the plan reads it, the same value is fine.
        CHECK(refusal(with(c.used_base, c.key, c.value)) == "");
    }
}

TEST_CASE("an unread key at its default is accepted (a resolved config holds every key)", "[train][config]") {
    // The resolved document of a synthetic SGD run names data.dir, optimizer.beta1, sync.sparse ... at their defaults.
    const json resolved = Config::from_json(kDense, "cfg.json").document();
    CHECK(resolved.at("optimizer").at("beta1") == 0.9);
    CHECK(refusal(resolved) == "");
    CHECK(refusal(resolved, {"optimizer.name=adam"}) == "");
    CHECK(refusal(with(kDense, "optimizer.gamma", 0.1)) == "");  // the step schedule's default
}

TEST_CASE("a --set that switches what reads a file's key makes a note, not a refusal", "[train][config]") {
    // A sweep over optimizer.name on a file written for FTRL: its l1 is unused by adagrad.
    const json ftrl_file = with(with(kSparse, "optimizer.name", "ftrl"), "optimizer.l1", 1.0);
    const Config c = Config::from_json(ftrl_file, "cfg.json", {"optimizer.name=adagrad"});
    REQUIRE(c.notes().size() == 1);
    CHECK_THAT(c.notes()[0], Contains("optimizer.l1 in cfg.json is not used with optimizer.name 'adagrad'") &&
                                 Contains("--set optimizer.name=adagrad") && Contains("ignored"));
    // The same file read as written has no note; the key given by --set itself is still refused.
    CHECK(Config::from_json(ftrl_file, "cfg.json").notes().empty());
    CHECK_THAT(refusal(kSparse, {"optimizer.name=adagrad", "optimizer.l1=1"}), Contains("--set optimizer.l1=1"));
    // A file whose own schedule leaves its gamma unread is refused, whatever else --set changes.
    CHECK_THAT(refusal(with(kDense, "optimizer.gamma", 0.5), {"optimizer.lr=0.5"}),
               Contains("cfg.json: optimizer.gamma: not used with optimizer.schedule 'constant'"));
}

TEST_CASE("a note only where the --set changed the key's use, and the ignored key is reset", "[train][config]") {
    // The file's own settings leave cycle_time_ms unread (overlap false): a --set of an unrelated decider does not
    // turn that into a note.
    const json no_overlap = with(with(kDense, "sync.overlap", false), "sync.cycle_time_ms", 5.0);
    CHECK_THAT(refusal(no_overlap, {"sync.fusion_bytes=1048576"}),
               Contains("cfg.json: sync.cycle_time_ms: not used with sync.overlap false"));
    // cycle_time_ms 0 asks for buckets by size, which is what a run without overlap does: accepted.
    CHECK(refusal(with(with(kDense, "sync.overlap", false), "sync.cycle_time_ms", 0.0)) == "");
    // A local SGD file swept to allreduce: its period is a note, and the resolved document holds the default.
    const json local = with(with(kDense, "sync.mode", "local_sgd"), "sync.local_sgd_period", 4);
    const Config swept = Config::from_json(local, "cfg.json", {"sync.mode=allreduce"});
    REQUIRE(swept.notes().size() == 1);
    CHECK_THAT(swept.notes()[0], Contains("sync.local_sgd_period in cfg.json is not used with sync.mode 'allreduce' "
                                          "(--set sync.mode=allreduce)"));
    CHECK(swept.document()["sync"]["local_sgd_period"] == 8);
    CHECK(refusal(swept.document()) == "");  // what `info` prints loads back
    // An image file (per-channel mean, augmentation, the CIFAR-10 folder) swept to synthetic data: notes, no refusal.
    const json cifar = {{"model", "models/alexnet_cifar.json"},
                        {"data", {{"format", "cifar10"}, {"dir", "/data/cifar"}, {"mean", {0.49, 0.48, 0.45}},
                                  {"std", {0.25, 0.24, 0.26}}, {"augment", {{"hflip", true}, {"random_crop_padding", 4}}}}}};
    const Config synthetic = Config::from_json(cifar, "cfg.json", {"data.format=synthetic"});
    CHECK(synthetic.notes().size() == 5);  // dir, mean, std, hflip, random_crop_padding
    CHECK(synthetic.plan().data.mean.values == std::vector<double>{0.0});
    CHECK_FALSE(synthetic.plan().data.augment_hflip);
}

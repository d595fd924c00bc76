// The sparse path's config keys: typed in the plan, in the digest, and the combinations one path would silently
// ignore refused with the key named.
#include <catch2/catch.hpp>

#include "ringtrain/core/error.hpp"
#include "ringtrain/train/config.hpp"

using namespace ringtrain::train;
using nlohmann::json;

namespace {

const json kSparse = {{"model", "models/sparse_logreg.json"},
                      {"data", {{"format", "criteo"}, {"train_file", "a.txt"}, {"test_file", "b.txt"}}}};
const json kDense = {{"model", "models/logreg.json"}, {"data", {{"format", "synthetic"}, {"synthetic_shape", {784}}}}};

std::string error_of(const json& doc, const std::vector<std::string>& sets = {}) {
    try {
        Config::from_json(doc, "cfg.json", sets);
    } catch (const ringtrain::InputError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("sparse keys are typed in the plan", "[train][config][sparse]") {
    // Each key under a plan that reads it (one that does not refuses it: test_config_usage).
    const Config c = Config::from_json(kSparse, "cfg.json",
                                       {"data.hash_bits=18", "data.criteo_integers=hash", "data.shuffle_buffer=64",
                                        "data.cache=true", "optimizer.name=ftrl", "optimizer.l1=0.5",
                                        "optimizer.l2=2", "optimizer.beta=0.25", "sync.sparse=allgather",
                                        "sync.sparse_update=replicated"});
    const RunPlan& p = c.plan();
    CHECK(p.data.format == DataFormat::Criteo);
    CHECK(p.data.is_sparse());
    CHECK(p.data.train_file == "a.txt");
    CHECK(p.data.test_file == "b.txt");
    const RunPlan libsvm = Config::from_json(kSparse, "cfg.json",
                                             {"data.format=libsvm", "data.index_base=0", "data.num_features=1000",
                                              "optimizer.name=adagrad", "optimizer.initial_accumulator=0.01"})
                               .plan();
    CHECK(libsvm.data.index_base == 0);
    CHECK(libsvm.data.num_features == 1000);
    CHECK(libsvm.optimizer.initial_accumulator == 0.01);
    CHECK(p.data.hash_bits == 18);
    CHECK(p.data.criteo_integers == CriteoIntegerTransform::Hash);
    CHECK(p.data.shuffle_buffer == 64);
    CHECK(p.data.cache);
    CHECK(p.optimizer.name == OptimizerName::Ftrl);
    CHECK(p.optimizer.l1 == 0.5);
    CHECK(p.optimizer.l2 == 2.0);
    CHECK(p.optimizer.beta == 0.25);
    CHECK(p.sync.sparse == SparseSync::Allgather);
    CHECK(p.sync.sparse_update == SparseUpdate::Replicated);
    CHECK(p.to_json() == c.document());
    CHECK_FALSE(Config::from_json(kDense, "cfg.json").plan().data.is_sparse());
    // Defaults: libsvm's 1-based indices, 2^20 hashed features, log2 integers, auto sync.
    const RunPlan d = Config::from_json(kSparse, "cfg.json").plan();
    CHECK(d.data.index_base == 1);
    CHECK(d.data.hash_bits == 20);
    CHECK(d.data.criteo_integers == CriteoIntegerTransform::Log2);
    CHECK(d.sync.sparse == SparseSync::Auto);
    CHECK(d.sync.sparse_update == SparseUpdate::Owner);  // owner-computes updates unless told otherwise
    CHECK(d.to_json()["sync"]["sparse_update"] == "owner");
    CHECK(Config::from_json(kSparse, "cfg.json", {"sync.sparse_update=replicated"}).plan().digest() != d.digest());
    CHECK(Config::from_json(kSparse, "cfg.json", {"sync.sparse=dense"}).plan().digest() != d.digest());
}

TEST_CASE("keys one path would ignore are refused, naming the key", "[train][config][sparse]") {
    using Catch::Matchers::Contains;
    CHECK_THAT(error_of(kDense, {"optimizer.name=ftrl"}), Contains("--set optimizer.name=ftrl: optimizer.name: 'ftrl' is for the sparse path"));
    CHECK_THAT(error_of(kDense, {"optimizer.name=adagrad"}), Contains("optimizer.name: 'adagrad'"));
    CHECK_THAT(error_of(kSparse, {"optimizer.name=adam"}), Contains("optimizer.name: 'adam' is not available on the sparse path"));
    CHECK_THAT(error_of(kSparse, {"optimizer.name=adadelta"}), Contains("optimizer.name: 'adadelta'"));
    CHECK_THAT(error_of(kSparse, {"data.train_file="}), Contains("--set data.train_file=: data.train_file: missing"));
    CHECK_THAT(error_of(kSparse, {"data.test_file="}), Contains("--set data.test_file=: data.test_file: missing"));
    CHECK_THAT(error_of(kSparse, {"optimizer.momentum=0.9"}), Contains("optimizer.momentum: not used with data.format 'criteo'"));
    CHECK_THAT(error_of(kSparse, {"optimizer.nesterov=true"}),
               Contains("--set optimizer.nesterov=true: optimizer.nesterov: not used with data.format"));
    CHECK_THAT(error_of(kSparse, {"optimizer.weight_decay=0.1"}), Contains("optimizer.weight_decay: not used with data.format"));
    CHECK_THAT(error_of(kSparse, {"optimizer.warmup_epochs=1"}), Contains("optimizer.warmup_epochs: not used with data.format"));
    CHECK_THAT(error_of(kSparse, {"sync.compression=fp16"}), Contains("sync.compression: not used with data.format"));
    CHECK_THAT(error_of(kSparse, {"sync.backward_passes_per_step=2"}), Contains("sync.backward_passes_per_step"));
    CHECK_THAT(error_of(kSparse, {"sync.backend=nccl"}), Contains("sync.backend: not available"));
    CHECK_THAT(error_of(kSparse, {"device=cuda"}), Contains("device: not available"));
    CHECK_THAT(error_of(kSparse, {"data.index_base=2"}), Contains("data.index_base: 2 is out of range"));
    CHECK_THAT(error_of(kSparse, {"data.hash_bits=31"}), Contains("data.hash_bits: 31 is out of range"));
    CHECK_THAT(error_of(kSparse, {"data.criteo_integers=log"}), Contains("data.criteo_integers: 'log' is not one of: log2, hash"));
    CHECK_THAT(error_of(kSparse, {"sync.sparse=sparse"}), Contains("sync.sparse: 'sparse' is not one of: auto, allgather, dense"));
    CHECK_THAT(error_of(kSparse, {"sync.sparse_update=owners"}),
               Contains("sync.sparse_update: 'owners' is not one of: owner, replicated"));
    CHECK(error_of(kSparse, {"optimizer.name=adagrad"}).empty());
    CHECK(error_of(kSparse, {"optimizer.name=sgd", "sync.mode=local_sgd"}).empty());
}

TEST_CASE("ftrl with beta 0 and l2 0 is refused, naming optimizer.beta", "[train][config][sparse]") {
    using Catch::Matchers::Contains;
    // Its rate alpha / (beta + sqrt(n)) + l2 would divide by zero where n underflows to 0.
    CHECK_THAT(error_of(kSparse, {"optimizer.name=ftrl", "optimizer.beta=0"}),
               Contains("--set optimizer.beta=0: optimizer.beta: 0 with optimizer.l2 0"));
    // The same values from the file: the file is named. Set on the command line: the --set is, as above.
    json in_file = kSparse;
    in_file["optimizer"] = {{"name", "ftrl"}, {"beta", 0}};
    CHECK_THAT(error_of(in_file), Contains("cfg.json: optimizer.beta: 0 with optimizer.l2 0"));
    CHECK_THAT(error_of(kDense, {"data.train_dir=x"}), Contains("--set data.train_dir=x: data.train_dir: not used"));
    CHECK(error_of(kSparse, {"optimizer.name=ftrl", "optimizer.beta=0", "optimizer.l2=0.5"}).empty());
    CHECK(error_of(kSparse, {"optimizer.name=ftrl", "optimizer.beta=0.1"}).empty());
    // beta is ftrl's only: another optimizer does not read it, so it is refused rather than ignored.
    CHECK_THAT(error_of(kSparse, {"optimizer.name=adagrad", "optimizer.beta=0"}),
               Contains("optimizer.beta: not used with optimizer.name 'adagrad'"));
}

TEST_CASE("adagrad's eps defaults to 1e-10 (PyTorch's), as the plan resolves it", "[train][config][sparse]") {
    CHECK(Config::from_json(kSparse, "cfg.json", {"optimizer.name=adagrad"}).plan().optimizer.resolved_eps() == 1e-10);
    CHECK(Config::from_json(kSparse, "cfg.json", {"optimizer.name=adagrad", "optimizer.eps=0.001"})
              .plan().optimizer.resolved_eps() == 0.001);
}

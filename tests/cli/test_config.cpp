// Config: defaults, overrides and model path resolution, in-process.
#include <catch2/catch.hpp>

#include "ringtrain/core/error.hpp"
#include "ringtrain/train/config.hpp"

using ringtrain::InputError;
using ringtrain::train::Config;
using nlohmann::json;

TEST_CASE("defaults are filled and overrides are typed", "[cli]") {
    json doc = {{"model", "models/logreg.json"}, {"train", {{"batch_size", 32}}}};
    const auto c = Config::from_json(doc, "test", {"train.epochs=3", "optimizer.lr=0.5", "data.prefetch=false",
                                                    "sync.backend=mpi", "output.dir=\"quoted dir\""});
    CHECK(c.integer("train.batch_size") == 32);
    CHECK(c.integer("train.epochs") == 3);
    CHECK(c.number("optimizer.lr") == 0.5);
    CHECK(c.boolean("data.prefetch") == false);
    CHECK(c.string("sync.backend") == "mpi");
    CHECK(c.string("output.dir") == "quoted dir");
    CHECK(c.string("optimizer.lr_scaling") == "linear");
    CHECK(c.integer("train.max_steps") == 0);
    CHECK(c.is_null("optimizer.eps"));
    CHECK(c.string("data.dir") == "/usr/share/datasets/fashion-mnist");
}

TEST_CASE("the model path is found relative to the source tree", "[cli]") {
    const auto c = Config::from_json({{"model", "models/lenet5.json"}}, "test");
    CHECK_THAT(c.model_path(), Catch::EndsWith("models/lenet5.json"));
}

TEST_CASE("a section given as a scalar and a wrong nested type are rejected", "[cli]") {
    CHECK_THROWS_WITH(Config::from_json({{"model", "m"}, {"train", 3}}, "t"), Catch::Contains("train: expected a section"));
    CHECK_THROWS_WITH(Config::from_json({{"model", "m"}, {"data", {{"synthetic_shape", {1, "a"}}}}}, "t"),
                      Catch::Contains("data.synthetic_shape: expected an array of integers"));
    CHECK_THROWS_AS(Config::from_json({{"model", "m"}, {"device", "tpu"}}, "t"), InputError);
}

// Integer keys are read as int64; JSON numbers past it (unsigned ones) must not wrap (2^64-1 would become -1).
TEST_CASE("integer keys refuse numbers past int64, at the edge too", "[cli]") {
    const auto with_seed = [](const std::string& seed) {
        return Config::from_json({{"model", "m"}, {"train", {{"seed", nlohmann::json::parse(seed)}}}}, "t");
    };
    CHECK(with_seed("9223372036854775807").plan().train.seed == 9223372036854775807ULL);
    CHECK_THROWS_WITH(with_seed("9223372036854775808"), Catch::Contains("train.seed: 9223372036854775808 is out of range"));
    CHECK_THROWS_WITH(with_seed("18446744073709551615"), Catch::Contains("<= 9223372036854775807"));
    CHECK_THROWS_WITH(Config::from_json({{"model", "m"}}, "t", {"train.seed=18446744073709551615"}),
                      Catch::Contains("train.seed"));
    CHECK_THROWS_WITH(Config::from_json({{"model", "m"}, {"data", {{"synthetic_shape", {1, 18446744073709551615ULL}}}}}, "t"),
                      Catch::Contains("data.synthetic_shape"));
}

TEST_CASE("--set: one key twice is refused, different keys and one key once are fine", "[cli]") {
    CHECK_THROWS_WITH(Config::from_json({{"model", "m"}}, "t", {"train.epochs=1", "train.epochs=1"}),
                      Catch::Equals("--set train.epochs: given twice (train.epochs=1, then train.epochs=1); pass each "
                                    "key once"));
    const auto c = Config::from_json({{"model", "m"}, {"train", {{"epochs", 5}}}}, "t", {"train.epochs=2", "train.seed=7"});
    CHECK(c.plan().train.epochs == 2);
    CHECK(c.plan().train.seed == 7);
}

TEST_CASE("--set values are parsed strictly: too deep or too large stays a type error, never a crash", "[cli]") {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    CHECK_THROWS_WITH(Config::from_json({{"model", "m"}}, "t", {"train.seed=" + deep}),
                      Catch::Contains("train.seed: expected an integer"));
    CHECK_THROWS_WITH(Config::from_json({{"model", "m"}}, "t", {"optimizer.lr=1e400"}),
                      Catch::Contains("optimizer.lr: expected a number"));
}

TEST_CASE("output.dir must not be empty", "[cli]") {
    CHECK_THROWS_WITH(Config::from_json({{"model", "m"}, {"output", {{"dir", ""}}}}, "t"),
                      Catch::StartsWith("t: output.dir: must not be empty"));
    CHECK_THROWS_WITH(Config::from_json({{"model", "m"}}, "t", {"output.dir="}), Catch::Contains("output.dir"));
}

TEST_CASE("an unknown key names the nearest known one, if any is near", "[cli]") {
    const json doc = {{"model", "m"}};
    auto error_of = [&](const std::string& set) {
        try {
            Config::from_json(doc, "t", {set});
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK(error_of("optimiser.lr=1") == "--set optimiser.lr: unknown key (did you mean optimizer.lr?) (see `ringtrain "
                                        "--help-config`)");
    CHECK_THAT(error_of("dir=1"), Catch::Contains("(did you mean data.dir or output.dir?)"));
    CHECK_THAT(error_of("lr=1"), Catch::Contains("(did you mean optimizer.lr?)"));
    // A --set cannot set a section: none is suggested there. Nothing near: no suggestion.
    CHECK_THAT(error_of("optimiser=1"), !Catch::Contains("did you mean"));
    CHECK_THAT(error_of("zzz=1"), !Catch::Contains("did you mean"));
    CHECK_THAT(error_of("data.name=x"), !Catch::Contains("optimizer.name"));  // a known section's unknown key
    // A section misspelt in a file is suggested.
    CHECK_THROWS_WITH(Config::from_json({{"model", "m"}, {"optimiser", {{"lr", 1}}}}, "f.json"),
                      Catch::Contains("f.json: optimiser: unknown key (did you mean optimizer?)"));
    // A megabyte-long key: shown cut, no suggestion sought (its distances would take a minute).
    const std::string long_key(1 << 20, 'a');
    const std::string said = error_of(long_key + "=1");
    CHECK(said.size() < 200);
    CHECK_THAT(said, Catch::Contains("...: unknown key"));
}

TEST_CASE("with_origin puts where a given key's value came from before a message about it, and nothing else",
          "[cli]") {
    const auto c = Config::from_json({{"model", "m"}, {"train", {{"epochs", 5}}}}, "f.json", {"optimizer.lr=2"});
    CHECK(c.with_origin("optimizer.lr: too large") == "--set optimizer.lr=2: optimizer.lr: too large");
    CHECK(c.with_origin("train.epochs: too many") == "f.json: train.epochs: too many");
    CHECK(c.with_origin("train.batch_size: 64 per rank ...") == "train.batch_size: 64 per rank ...");  // a default
    CHECK(c.with_origin("f.json: train.epochs: said already") == "f.json: train.epochs: said already");
    CHECK(c.with_origin("no key here") == "no key here");
}

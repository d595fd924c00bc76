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

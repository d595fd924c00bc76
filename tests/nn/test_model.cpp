// Model: the shipped architectures (shapes, parameter counts), a whole-model finite-difference check, the
// on_ready order of backward, accumulate, and the errors for bad model JSON.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "gradient_check.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/model.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;
using nlohmann::json;

namespace {

std::string model_path(const std::string& name) { return std::string(RINGTRAIN_SOURCE_DIR) + "/models/" + name; }

// The tiny model of the whole-model check: conv -> relu -> pool -> flatten -> linear (optionally with dropout).
json tiny_arch(bool dropout) {
    json layers = json::array({
        {{"type", "conv2d"}, {"name", "conv"}, {"out_channels", 3}, {"kernel", 3}, {"padding", 1}},
        {{"type", "relu"}},
        {{"type", "maxpool2d"}, {"kernel", 2}},
        {{"type", "flatten"}},
    });
    if (dropout) layers.push_back({{"type", "dropout"}, {"p", 0.3}});
    layers.push_back({{"type", "linear"}, {"name", "fc"}, {"out_features", 4}});
    return {{"name", "tiny"}, {"input", {2, 6, 6}}, {"layers", layers}, {"loss", "softmax_cross_entropy"}};
}

// The message of the InputError that building `arch` on `input` throws ("" and a failed check if none).
std::string build_error(const json& arch, const Shape& input = {1, 8, 8}) {
    Rng rng(1);
    try {
        Model m(arch, input, rng, "bad.json");
    } catch (const InputError& e) {
        return e.what();
    }
    FAIL_CHECK("no InputError for " << arch.dump());
    return "";
}

json with_layers(json layers) { return {{"name", "bad"}, {"layers", std::move(layers)}}; }

struct ModelCheck {
    int64_t checked = 0, skipped = 0;
    gradcheck::Report report;
};

// d(scale * sum loss)/dparam of the model by central differences, against Model::backward of the loss's
// dlogits. Kinks inside the model (ReLU, pool) cannot be avoided by choosing the input, so an element whose
// two estimates (eps and eps/2) disagree crossed a kink and is skipped; the caller bounds how many are.
ModelCheck check_model(Model& m, Tensor& x, const Tensor& labels, bool training, float scale) {
    const uint64_t seed = 555;
    auto loss_at = [&]() {
        Rng r(seed);
        const Tensor& y = m.forward(x, ForwardContext{training, &r});
        return static_cast<double>(scale) * m.loss().forward(y, labels).loss_sum;
    };
    loss_at();
    Tensor dlogits;
    m.loss().backward(labels, scale, dlogits);
    m.backward(dlogits);
    std::vector<Tensor> analytic;
    for (auto* p : m.parameters()) analytic.push_back(p->grad.clone());

    gradcheck::Options o;
    ModelCheck mc;
    for (size_t k = 0; k < m.parameters().size(); ++k) {
        Parameter* p = m.parameters()[k];
        const auto n1 = gradcheck::numeric_gradient(p->value, 2e-3, loss_at);
        const auto n2 = gradcheck::numeric_gradient(p->value, 1e-3, loss_at);
        for (int64_t i = 0; i < p->value.numel(); ++i) {
            ++mc.checked;
            const double tol = o.abs_tol + o.rel_tol * std::max(std::fabs(n1[i]), std::fabs(n2[i]));
            if (std::fabs(n1[i] - n2[i]) > tol) {
                ++mc.skipped;
                continue;
            }
            gradcheck::compare(mc.report, o, p->name, i, analytic[k].data()[i], n2[i]);
        }
    }
    return mc;
}

}  // namespace

// ---- shipped models ------------------------------------------------------------------------------------

TEST_CASE("shipped models build on 1x28x28 with the expected parameter counts", "[nn][model]") {
    struct Case {
        const char* file;
        int64_t params;
        std::vector<std::string> names;
    };
    const Case cases[] = {
        {"logreg.json", 784 * 10 + 10, {"fc.weight", "fc.bias"}},  // 7850
        // conv1 6*1*25+6 = 156, conv2 16*6*25+16 = 2416, fc1 400*120+120 = 48120, fc2 120*84+84 = 10164,
        // fc3 84*10+10 = 850: 61706
        {"lenet5.json",
         61706,
         {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight", "fc1.bias", "fc2.weight",
          "fc2.bias", "fc3.weight", "fc3.bias"}},
        // conv1 32*9+32 = 320, conv2 64*32*9+64 = 18496, fc1 (64*12*12)*128+128 = 1179776, fc2 128*10+10 = 1290
        {"mnist_cnn.json",
         1199882,
         {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight", "fc1.bias", "fc2.weight",
          "fc2.bias"}},
    };
    for (const auto& c : cases) {
        SECTION(c.file) {
            Rng rng(2);
            Model m = Model::from_file(model_path(c.file), {1, 28, 28}, rng);
            REQUIRE(m.parameter_count() == c.params);
            REQUIRE(m.output_shape() == Shape{10});
            std::vector<std::string> names;
            for (auto* p : m.parameters()) names.push_back(p->name);
            REQUIRE(names == c.names);
            REQUIRE_THAT(m.describe(), Catch::Contains(std::to_string(c.params) + " parameters"));

            Rng data(3);
            Tensor x = gradcheck::random_tensor({3, 1, 28, 28}, data, 0.0f, 1.0f);
            const Tensor& y = m.forward(x, ForwardContext{false, nullptr});
            REQUIRE(y.shape() == Shape{3, 10});
            for (float v : y.span()) REQUIRE(std::isfinite(v));
            Rng drop(4);
            REQUIRE(m.forward(x, ForwardContext{true, &drop}).shape() == Shape{3, 10});
        }
    }
}

TEST_CASE("logreg declares a flat input and accepts 1x28x28 samples", "[nn][model]") {
    Rng rng(2);
    Model m = Model::from_file(model_path("logreg.json"), {1, 28, 28}, rng);
    REQUIRE(m.input_shape() == Shape{784});
    REQUIRE(m.name() == "logreg");
    REQUIRE(m.parameters()[0]->value.shape() == Shape{10, 784});
}

TEST_CASE("the same seed builds the same weights", "[nn][model]") {
    Rng a(9), b(9), c(10);
    Model ma = Model::from_file(model_path("lenet5.json"), {1, 28, 28}, a);
    Model mb = Model::from_file(model_path("lenet5.json"), {1, 28, 28}, b);
    Model mc = Model::from_file(model_path("lenet5.json"), {1, 28, 28}, c);
    bool all_same = true, all_same_c = true;
    for (size_t k = 0; k < ma.parameters().size(); ++k)
        for (int64_t i = 0; i < ma.parameters()[k]->value.numel(); ++i) {
            all_same &= ma.parameters()[k]->value.data()[i] == mb.parameters()[k]->value.data()[i];
            all_same_c &= ma.parameters()[k]->value.data()[i] == mc.parameters()[k]->value.data()[i];
        }
    REQUIRE(all_same);
    REQUIRE_FALSE(all_same_c);
}

// ---- whole-model gradient check ---------------------------------------------------------------------

TEST_CASE("whole-model gradients by finite differences", "[nn][model][gradcheck]") {
    const bool dropout = GENERATE(false, true);
    CAPTURE(dropout);
    Rng rng(12);
    Model m(tiny_arch(dropout), {2, 6, 6}, rng, "tiny");
    REQUIRE(m.output_shape() == Shape{4});
    REQUIRE(m.parameter_count() == (3 * 2 * 9 + 3) + (27 * 4 + 4));
    Rng data(13);
    Tensor x = gradcheck::random_tensor({2, 2, 6, 6}, data);
    Tensor labels({2});
    labels.data()[0] = 1, labels.data()[1] = 3;
    const auto mc = check_model(m, x, labels, /*training=*/dropout, 0.5f);
    INFO("skipped " << mc.skipped << " of " << mc.checked << " (kink crossings)");
    REQUIRE(mc.checked == m.parameter_count());
    REQUIRE(mc.skipped <= mc.checked / 50);
    REQUIRE_GRADIENTS_OK(mc.report);
}

TEST_CASE("model forward accepts flat samples and the declared shape alike", "[nn][model]") {
    Rng rng(12);
    Model m(tiny_arch(false), {72}, rng, "tiny");  // 72 = 2*6*6 elements, declared [2, 6, 6]
    REQUIRE(m.input_shape() == Shape{2, 6, 6});
    Rng data(13);
    Tensor x = gradcheck::random_tensor({2, 2, 6, 6}, data);
    const Tensor y1 = m.forward(x, {false, nullptr}).clone();
    const Tensor y2 = m.forward(x.reshape({2, 72}), {false, nullptr}).clone();
    REQUIRE(y1.shape() == Shape{2, 4});
    for (int64_t i = 0; i < y1.numel(); ++i) REQUIRE(y1.data()[i] == y2.data()[i]);
    // A smaller batch after a larger one (buffers keep capacity) still gives the right answer.
    const Tensor y3 = m.forward(x.slice_rows(1, 2), {false, nullptr}).clone();
    REQUIRE(y3.shape() == Shape{1, 4});
    for (int64_t i = 0; i < 4; ++i) REQUIRE(y3.data()[i] == Approx(y1.data()[4 + i]));
}

// ---- backward: on_ready order, accumulate ----------------------------------------------------------

TEST_CASE("backward reports each parameter once, last layer first, with its final gradient", "[nn][model]") {
    for (const char* file : {"lenet5.json", "mnist_cnn.json"}) {
        SECTION(file) {
            Rng rng(5);
            Model m = Model::from_file(model_path(file), {1, 28, 28}, rng);
            Rng data(6);
            Tensor x = gradcheck::random_tensor({2, 1, 28, 28}, data, 0.0f, 1.0f);
            Tensor labels({2});
            labels.data()[0] = 3, labels.data()[1] = 7;
            Rng drop(7);
            m.loss().forward(m.forward(x, {true, &drop}), labels);
            Tensor dl;
            m.loss().backward(labels, 0.5f, dl);

            std::vector<Parameter*> order;
            std::map<Parameter*, Tensor> at_report;
            m.backward(dl, [&](Parameter& p) {
                order.push_back(&p);
                at_report[&p] = p.grad.clone();
            });
            std::vector<Parameter*> expected(m.parameters().rbegin(), m.parameters().rend());
            REQUIRE(order == expected);  // each exactly once, last layer (bias, then weight) first
            REQUIRE(order.front()->name.find("bias") != std::string::npos);
            for (auto* p : m.parameters()) {
                const Tensor& snap = at_report.at(p);
                bool same = true, nonzero = false;
                for (int64_t i = 0; i < snap.numel(); ++i) {
                    same &= snap.data()[i] == p->grad.data()[i];
                    nonzero |= p->grad.data()[i] != 0.0f;
                }
                INFO(p->name);
                REQUIRE(same);     // nothing touched the gradient after it was reported ready
                REQUIRE(nonzero);  // and it is a real gradient
            }
        }
    }
}

TEST_CASE("model backward with accumulate adds, zero_grad clears", "[nn][model][accumulate]") {
    Rng rng(12);
    Model m(tiny_arch(false), {2, 6, 6}, rng, "tiny");
    Rng data(13);
    Tensor x = gradcheck::random_tensor({2, 2, 6, 6}, data);
    Tensor labels = Tensor::filled({2}, 2.0f);
    m.loss().forward(m.forward(x, {false, nullptr}), labels);
    Tensor dl;
    m.loss().backward(labels, 1.0f, dl);
    m.backward(dl);
    std::vector<Tensor> once;
    for (auto* p : m.parameters()) once.push_back(p->grad.clone());
    m.backward(dl, {}, true);
    for (size_t k = 0; k < once.size(); ++k)
        for (int64_t i = 0; i < once[k].numel(); ++i)
            REQUIRE(m.parameters()[k]->grad.data()[i] == Approx(2.0f * once[k].data()[i]).margin(1e-6));
    m.backward(dl);  // without accumulate: back to one gradient
    for (size_t k = 0; k < once.size(); ++k)
        for (int64_t i = 0; i < once[k].numel(); ++i)
            REQUIRE(m.parameters()[k]->grad.data()[i] == Approx(once[k].data()[i]).margin(1e-6));
    m.zero_grad();
    for (auto* p : m.parameters())
        for (float v : p->grad.span()) REQUIRE(v == 0.0f);
}

// ---- bad model JSON ----------------------------------------------------------------------------------

TEST_CASE("bad model JSON: errors name the JSON path", "[nn][model][errors]") {
    const json conv = {{"type", "conv2d"}, {"out_channels", 2}, {"kernel", 3}};
    SECTION("unknown layer type") {
        const auto msg = build_error(with_layers({{{"type", "flatten"}}, {{"type", "dense"}, {"out_features", 3}}}));
        REQUIRE_THAT(msg, Catch::Contains("bad.json") && Catch::Contains("layers[1].type") &&
                              Catch::Contains("dense"));
    }
    SECTION("unknown key on a layer") {
        const auto msg = build_error(with_layers({conv, {{"type", "maxpool2d"}, {"kernel", 2}, {"strdie", 2}}}));
        REQUIRE_THAT(msg, Catch::Contains("layers[1].strdie") && Catch::Contains("unknown key"));
    }
    SECTION("missing out_features") {
        const auto msg = build_error(with_layers({{{"type", "flatten"}}, {{"type", "linear"}}}));
        REQUIRE_THAT(msg, Catch::Contains("layers[1].out_features") && Catch::Contains("missing"));
    }
    SECTION("wrongly typed value") {
        const auto msg = build_error(
            with_layers({{{"type", "conv2d"}, {"out_channels", 2}, {"kernel", "3"}}}));
        REQUIRE_THAT(msg, Catch::Contains("layers[0].kernel"));
        const auto msg2 = build_error(with_layers({{{"type", "flatten"}}, {{"type", "linear"}, {"out_features", 0}}}));
        REQUIRE_THAT(msg2, Catch::Contains("layers[1].out_features"));
    }
    SECTION("duplicate names") {
        const auto msg = build_error(with_layers({{{"type", "flatten"}, {"name", "a"}},
                                                  {{"type", "linear"}, {"name", "fc"}, {"out_features", 3}},
                                                  {{"type", "linear"}, {"name", "fc"}, {"out_features", 3}}}));
        REQUIRE_THAT(msg, Catch::Contains("layers[2].name") && Catch::Contains("fc"));
    }
    SECTION("dropout probability out of range") {
        const auto msg = build_error(with_layers({{{"type", "dropout"}, {"p", 1.0}}}));
        REQUIRE_THAT(msg, Catch::Contains("layers[0].p"));
    }
    SECTION("top level") {
        REQUIRE_THAT(build_error({{"layers", json::array()}}), Catch::Contains(".layers"));
        REQUIRE_THAT(build_error({{"layer", json::array({{{"type", "flatten"}}})}}), Catch::Contains(".layer"));
        json wrong_input = with_layers({{{"type", "flatten"}}});
        wrong_input["input"] = {1, 28, 28};
        REQUIRE_THAT(build_error(wrong_input, {1, 8, 8}), Catch::Contains(".input"));
        json bad_loss = with_layers({{{"type", "flatten"}}});
        bad_loss["loss"] = "hinge";
        REQUIRE_THAT(build_error(bad_loss), Catch::Contains("hinge"));
    }
    SECTION("missing or malformed file") {
        Rng rng(1);
        REQUIRE_THROWS_AS(Model::from_file(model_path("no_such_model.json"), {1, 28, 28}, rng), InputError);
        REQUIRE_THROWS_AS(Model::from_file(std::string(RINGTRAIN_SOURCE_DIR) + "/CMakeLists.txt", {1, 28, 28}, rng),
                          InputError);
    }
}

TEST_CASE("bad model JSON: shape misfits name the layer", "[nn][model][errors]") {
    SECTION("kernel bigger than input") {
        const auto msg = build_error(
            with_layers({{{"type", "conv2d"}, {"name", "big"}, {"out_channels", 2}, {"kernel", 9}}}));
        REQUIRE_THAT(msg, Catch::Contains("big"));
    }
    SECTION("pool window bigger than input") {
        const auto msg = build_error(with_layers({{{"type", "maxpool2d"}, {"name", "pool"}, {"kernel", 9}}}));
        REQUIRE_THAT(msg, Catch::Contains("pool"));
    }
    SECTION("non-flat input to linear") {
        const auto msg = build_error(with_layers({{{"type", "linear"}, {"name", "fc"}, {"out_features", 3}}}));
        REQUIRE_THAT(msg, Catch::Contains("fc") && Catch::Contains("flat"));
    }
}

// Shape errors come from Layer::output_shape; Model adds the file and the JSON path, so the layer can be found.
TEST_CASE("bad model JSON: shape misfits also name the file and JSON path", "[nn][model][errors]") {
    SECTION("kernel bigger than input") {
        const auto msg = build_error(with_layers({{{"type", "conv2d"}, {"out_channels", 2}, {"kernel", 9}}}));
        REQUIRE_THAT(msg, Catch::Contains("bad.json") && Catch::Contains("layers[0]"));
    }
    SECTION("non-flat input to linear") {
        const auto msg = build_error(with_layers({{{"type", "relu"}}, {{"type", "linear"}, {"out_features", 3}}}));
        REQUIRE_THAT(msg, Catch::Contains("bad.json") && Catch::Contains("layers[1]"));
    }
}

// A misspelt required key ("kernal" for "kernel") is reported as the unknown key the user wrote.
TEST_CASE("bad model JSON: a misspelt required key is reported by its path", "[nn][model][errors]") {
    const json conv = {{"type", "conv2d"}, {"out_channels", 2}, {"kernel", 3}};
    const auto msg = build_error(with_layers({conv, {{"type", "conv2d"}, {"out_channels", 2}, {"kernal", 3}}}));
    CHECK_THAT(msg, Catch::Contains("layers[1]"));
    REQUIRE_THAT(msg, Catch::Contains("layers[1].kernal"));
}

// A non-string "name" or "loss" is bad input naming its path, not an internal JSON type error.
TEST_CASE("bad model JSON: non-string name or loss is an InputError", "[nn][model][errors]") {
    SECTION("layer name") {
        const auto msg = build_error(with_layers({{{"type", "flatten"}, {"name", 1}}}));
        REQUIRE_THAT(msg, Catch::Contains("layers[0].name"));
    }
    SECTION("model name") {
        json arch = with_layers({{{"type", "flatten"}}});
        arch["name"] = json::array();
        REQUIRE_THAT(build_error(arch), Catch::Contains(".name"));
    }
    SECTION("loss") {
        json arch = with_layers({{{"type", "flatten"}}});
        arch["loss"] = 3;
        REQUIRE_THAT(build_error(arch), Catch::Contains(".loss"));
    }
}

// Model::footprint is what the trainer's memory estimate reads before building: it must count what building
// allocates, for every shipped model.
TEST_CASE("model footprint: parameters and shapes as the built model has them, nothing allocated", "[nn][model]") {
    for (const char* file : {"logreg.json", "lenet5.json", "mnist_cnn.json"}) {
        SECTION(file) {
            Rng rng(2);
            const Model m = Model::from_file(model_path(file), {1, 28, 28}, rng);
            const ModelFootprint f = Model::footprint(model_path(file), {1, 28, 28});
            double params = 0;
            for (const auto& l : f.layers) {
                params += l.parameters;
                CHECK(l.outputs >= 1);
                CHECK_THAT(l.where, Catch::Contains(file) && Catch::Contains(".layers["));
            }
            CHECK(params == double(m.parameter_count()));
            CHECK(f.output == m.output_shape());
            CHECK(f.input == m.input_shape());
            CHECK(f.loss == "softmax_cross_entropy");
        }
    }
    // A layer too large to build is still described (here 784 x 10^9 weights, about 3 TiB).
    const std::string dir = std::string(RINGTRAIN_SOURCE_DIR) + "/tests/bad_inputs/models/";
    const ModelFootprint big = Model::footprint(dir + "out_features_1e9.json", {1, 28, 28});
    CHECK(big.layers.at(0).parameters == 784.0 * 1e9 + 1e9);
    CHECK(big.layers.at(0).outputs == 1e9);
}

TEST_CASE("bad model JSON: integers past what BLAS takes, or past int64, name the key", "[nn][model][errors]") {
    const json over = json::parse("18446744073709551615");  // 2^64-1: an unsigned JSON number
    SECTION("padding 2^31") {
        const auto msg = build_error(with_layers(
            {{{"type", "conv2d"}, {"out_channels", 2}, {"kernel", 3}, {"padding", int64_t{1} << 31}}}));
        REQUIRE_THAT(msg, Catch::Contains("layers[0].padding") && Catch::Contains("2147483647"));
    }
    SECTION("out_features 2^64-1, alone and in a pair") {
        const auto msg = build_error(with_layers({{{"type", "flatten"}}, {{"type", "linear"}, {"out_features", over}}}));
        REQUIRE_THAT(msg, Catch::Contains("layers[1].out_features") && Catch::Contains("18446744073709551615"));
        const auto msg2 = build_error(
            with_layers({{{"type", "conv2d"}, {"out_channels", 2}, {"kernel", json::array({3, over})}}}));
        REQUIRE_THAT(msg2, Catch::Contains("layers[0].kernel"));
    }
    SECTION("an output too large for one sample") {
        const auto msg = build_error(with_layers(
            {{{"type", "conv2d"}, {"out_channels", 6}, {"kernel", 3}, {"padding", (int64_t{1} << 31) - 1}}}));
        REQUIRE_THAT(msg, Catch::Contains("bad.json: .layers[0]") && Catch::Contains("output"));
    }
}

TEST_CASE("bad model JSON: input dimensions must be positive", "[nn][model][errors]") {
    for (const json& input : {json{-1, -64}, json{0, 64}, json::array(), json{1, "8", 8}}) {
        json arch = with_layers({{{"type", "flatten"}}});
        arch["input"] = input;
        INFO(input.dump());
        REQUIRE_THAT(build_error(arch, {1, 8, 8}), Catch::Contains(".input: expected an array of positive integers"));
    }
}

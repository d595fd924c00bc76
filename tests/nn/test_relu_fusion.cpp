// The CPU's ReLU fusion (nn::Model): a relu after a conv2d or a batchnorm runs in that layer's forward, its backward
// in the conv2d or maxpool2d after it. The fused model must give the unfused model's logits, loss and gradients; the
// unfused twin has each relu between dropout(p = 0) layers (exact identities in training), so nothing fuses there.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "ringtrain/nn/model.hpp"
#include "ringtrain/ops/cpu_conv.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;
using nlohmann::json;

namespace {

// A model of `layers`, each null standing for a relu; `separated` puts a dropout(p = 0) on both sides of each relu
// (exact identities in training), so that nothing fuses.
json with_relus(const std::string& name, const json& layers, bool separated) {
    const json id = {{"type", "dropout"}, {"p", 0.0}};
    json out = json::array();
    for (const json& l : layers) {
        if (!l.is_null()) {
            out.push_back(l);
            continue;
        }
        if (separated) out.push_back(id);
        out.push_back({{"type", "relu"}});
        if (separated) out.push_back(id);
    }
    return {{"name", name}, {"input", {3, 10, 10}}, {"layers", out}, {"loss", "softmax_cross_entropy"}};
}

// conv -> relu -> conv -> relu -> maxpool -> flatten -> linear (the MNIST CNN's pattern; 8 and 16 channels are
// whole blocks of oneDNN's nChw8c).
json arch(bool separated) {
    json layers = json::array();
    const json relu = nullptr;
    layers.push_back({{"type", "conv2d"}, {"name", "conv1"}, {"out_channels", 8}, {"kernel", 3}, {"padding", 1}});
    layers.push_back(relu);
    layers.push_back({{"type", "conv2d"}, {"name", "conv2"}, {"out_channels", 16}, {"kernel", 3}});
    layers.push_back(relu);
    layers.push_back({{"type", "maxpool2d"}, {"kernel", 2}});
    layers.push_back({{"type", "flatten"}});
    layers.push_back({{"type", "linear"}, {"name", "fc"}, {"out_features", 5}});
    return with_relus("fusion", layers, separated);
}

struct Step {
    std::vector<float> logits;
    std::vector<std::vector<float>> grads;
};

// Two training steps' forward and backward (the second accumulating, as gradient accumulation does), same data.
Step run(Model& m, const Tensor& x, const Tensor& labels) {
    Step s;
    Rng drop(3);
    m.zero_grad();
    for (int i = 0; i < 2; ++i) {
        const Tensor& logits = m.forward(x, {true, &drop});
        s.logits.assign(logits.span().begin(), logits.span().end());
        m.loss().forward(logits, labels);
        Tensor dlogits(logits.shape());
        m.loss().backward(labels, 1.0f / static_cast<float>(x.dim(0)), dlogits);
        m.backward(dlogits, {}, /*accumulate=*/i > 0);
    }
    for (Parameter* p : m.parameters()) s.grads.emplace_back(p->grad.span().begin(), p->grad.span().end());
    return s;
}

void require_close(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        CAPTURE(i, a[i], b[i]);
        REQUIRE(std::fabs(a[i] - b[i]) <= 1e-5f + 1e-4f * std::fabs(b[i]));
    }
}

}  // namespace

TEST_CASE("ReLU fusion: the fused model equals the unfused one on every CPU convolution path", "[nn][fusion]") {
    Rng data_rng(7);
    Tensor x({6, 3, 10, 10}), labels({6});
    for (float& v : x.span()) v = data_rng.uniform(-1.0f, 1.0f);
    for (int64_t i = 0; i < 6; ++i) labels.data()[i] = static_cast<float>(i % 5);
    std::vector<ops::CpuConv> paths{ops::CpuConv::Auto, ops::CpuConv::Im2col};
    if (ops::onednn_available()) paths.push_back(ops::CpuConv::OneDnn);
    for (ops::CpuConv path : paths) {
        CAPTURE(static_cast<int>(path));
        ops::set_cpu_conv(path);
        Rng r1(11), r2(11);  // dropout layers draw nothing at build: both get the same parameters
        Model fused(arch(false), {3, 10, 10}, r1), plain(arch(true), {3, 10, 10}, r2);
        REQUIRE(fused.fused_relus() == std::pair<int, int>{2, 2});  // both relus, both directions
        REQUIRE(plain.fused_relus() == std::pair<int, int>{0, 0});
        const Step a = run(fused, x, labels), b = run(plain, x, labels);
        require_close(a.logits, b.logits);
        REQUIRE(a.grads.size() == b.grads.size());
        for (size_t i = 0; i < a.grads.size(); ++i) require_close(a.grads[i], b.grads[i]);
    }
    ops::set_cpu_conv(ops::CpuConv::Auto);
}

// conv -> batchnorm2d -> relu -> maxpool, then batchnorm1d -> relu -> linear (the quality CNN's block, and a relu
// whose backward nobody fuses).
json bn_arch(bool separated) {
    const json relu = nullptr;
    const json layers = {{{"type", "conv2d"}, {"out_channels", 8}, {"kernel", 3}, {"padding", 1}, {"bias", false}},
                         {{"type", "batchnorm2d"}},
                         relu,
                         {{"type", "maxpool2d"}, {"kernel", 2}},
                         {{"type", "flatten"}},
                         {{"type", "batchnorm1d"}},
                         relu,
                         {{"type", "linear"}, {"out_features", 5}}};
    return with_relus("bn_fusion", layers, separated);
}

TEST_CASE("ReLU fusion after batchnorm: the fused model equals the unfused one", "[nn][fusion][batchnorm]") {
    Rng data_rng(8);
    Tensor x({6, 3, 10, 10}), labels({6});
    for (float& v : x.span()) v = data_rng.uniform(-1.0f, 1.0f);
    for (int64_t i = 0; i < 6; ++i) labels.data()[i] = static_cast<float>(i % 5);
    Rng r1(12), r2(12);
    Model fused(bn_arch(false), {3, 10, 10}, r1), plain(bn_arch(true), {3, 10, 10}, r2);
    // Both relus' forwards (by the batchnorms), the first one's backward (by the maxpool).
    REQUIRE(fused.fused_relus() == std::pair<int, int>{2, 1});
    REQUIRE(plain.fused_relus() == std::pair<int, int>{0, 0});
    const Step a = run(fused, x, labels), b = run(plain, x, labels);
    require_close(a.logits, b.logits);
    REQUIRE(a.grads.size() == b.grads.size());
    for (size_t i = 0; i < a.grads.size(); ++i) require_close(a.grads[i], b.grads[i]);
    // Evaluation (running statistics) fuses the same way.
    Rng none(1);
    const Tensor& ea = fused.forward(x, {false, &none});
    const std::vector<float> eval_fused(ea.span().begin(), ea.span().end());
    const Tensor& eb = plain.forward(x, {false, &none});
    require_close(eval_fused, std::vector<float>(eb.span().begin(), eb.span().end()));
}

TEST_CASE("ReLU fusion: only next to a conv2d or maxpool2d", "[nn][fusion]") {
    Rng rng(1);
    const json relu_first = {{"input", {2, 6, 6}},
                             {"layers",
                              {{{"type", "relu"}},
                               {{"type", "conv2d"}, {"out_channels", 2}, {"kernel", 3}},
                               {{"type", "relu"}},
                               {{"type", "flatten"}},
                               {{"type", "linear"}, {"out_features", 2}},
                               {{"type", "relu"}}}}};
    // relu0: backward by the conv after it; relu2: forward by the conv before it; relu5 (after linear): neither.
    REQUIRE(Model(relu_first, {2, 6, 6}, rng).fused_relus() == std::pair<int, int>{1, 1});
}

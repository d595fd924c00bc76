// Optimizers from make_optimizer on small parameters: values after a few steps against hand-computed numbers
// (arithmetic in the comments), state names and counts, errors.
#include <catch2/catch.hpp>

#include <memory>

#include "ringtrain/core/error.hpp"
#include "ringtrain/optim/optimizer.hpp"

using namespace ringtrain;
using namespace ringtrain::optim;
using ringtrain::nn::Parameter;

namespace {

Parameter make_param(const std::string& name, std::vector<float> value, std::vector<float> grad) {
    REQUIRE(value.size() == grad.size());
    Parameter p{name, Tensor({static_cast<int64_t>(value.size())}), Tensor({static_cast<int64_t>(grad.size())})};
    std::copy(value.begin(), value.end(), p.value.data());
    std::copy(grad.begin(), grad.end(), p.grad.data());
    return p;
}

// Two parameters: a = [1, -2] with gradient [0.5, 0.25], b = [3] with gradient [-1]. Gradients stay fixed
// between steps unless a test changes them.
struct Fixture {
    Parameter a = make_param("a", {1.0f, -2.0f}, {0.5f, 0.25f});
    Parameter b = make_param("b", {3.0f}, {-1.0f});
    std::vector<Parameter*> params() { return {&a, &b}; }
};

OptimizerOptions sgd(float momentum = 0.0f, bool nesterov = false, float wd = 0.0f) {
    OptimizerOptions o;
    o.name = "sgd";
    o.momentum = momentum;
    o.nesterov = nesterov;
    o.weight_decay = wd;
    return o;
}

std::vector<std::string> state_names(Optimizer& opt) {
    std::vector<std::string> n;
    for (auto& [name, t] : opt.state()) n.push_back(name);
    return n;
}

constexpr double kRel = 1e-5;

}  // namespace

TEST_CASE("sgd without momentum", "[optim][sgd]") {
    Fixture f;
    auto opt = make_optimizer(sgd(), f.params());
    REQUIRE(opt->name() == "sgd");
    // w -= lr * g with lr 0.1:
    // a[0]: 1 - 0.05 = 0.95, then 0.90; a[1]: -2 - 0.025 = -2.025, then -2.05; b: 3 + 0.1 = 3.1, then 3.2
    opt->step(0.1f);
    REQUIRE(f.a.value.data()[0] == Approx(0.95).epsilon(kRel));
    REQUIRE(f.a.value.data()[1] == Approx(-2.025).epsilon(kRel));
    REQUIRE(f.b.value.data()[0] == Approx(3.1).epsilon(kRel));
    opt->step(0.1f);
    REQUIRE(f.a.value.data()[0] == Approx(0.90).epsilon(kRel));
    REQUIRE(f.a.value.data()[1] == Approx(-2.05).epsilon(kRel));
    REQUIRE(f.b.value.data()[0] == Approx(3.2).epsilon(kRel));
    // The lr passed to step is the one used: 0.9 - 0.05 * 0.5 = 0.875
    opt->step(0.05f);
    REQUIRE(f.a.value.data()[0] == Approx(0.875).epsilon(kRel));
    REQUIRE(opt->steps_taken() == 3);
    REQUIRE(opt->state().empty());  // no momentum buffer without momentum
    // The gradient is not modified by the step.
    REQUIRE(f.a.grad.data()[0] == 0.5f);
}

TEST_CASE("sgd with momentum", "[optim][sgd]") {
    Fixture f;
    auto opt = make_optimizer(sgd(0.9f), f.params());
    // v = 0.9 v + g; w -= 0.1 v
    // a[0] (g 0.5):  v1 = 0.5,              w1 = 1 - 0.05 = 0.95
    //                v2 = 0.45 + 0.5 = 0.95, w2 = 0.95 - 0.095 = 0.855
    //                v3 = 0.855 + 0.5 = 1.355, w3 = 0.855 - 0.1355 = 0.7195
    // b (g -1):      v1 = -1, w1 = 3.1; v2 = -1.9, w2 = 3.29; v3 = -2.71, w3 = 3.561
    opt->step(0.1f);
    REQUIRE(f.a.value.data()[0] == Approx(0.95).epsilon(kRel));
    REQUIRE(f.b.value.data()[0] == Approx(3.1).epsilon(kRel));
    opt->step(0.1f);
    REQUIRE(f.a.value.data()[0] == Approx(0.855).epsilon(kRel));
    REQUIRE(f.b.value.data()[0] == Approx(3.29).epsilon(kRel));
    opt->step(0.1f);
    REQUIRE(f.a.value.data()[0] == Approx(0.7195).epsilon(kRel));
    REQUIRE(f.b.value.data()[0] == Approx(3.561).epsilon(kRel));
    // a[1] (g 0.25): v 0.25, 0.475, 0.6775; w -2.025, -2.0725, -2.14025
    REQUIRE(f.a.value.data()[1] == Approx(-2.14025).epsilon(kRel));

    auto s = opt->state();
    REQUIRE(state_names(*opt) == std::vector<std::string>{"a.momentum_buffer", "b.momentum_buffer"});
    REQUIRE(s[0].second->shape() == f.a.value.shape());
    REQUIRE(s[0].second->data()[0] == Approx(1.355).epsilon(kRel));
    REQUIRE(s[0].second->data()[1] == Approx(0.6775).epsilon(kRel));
    REQUIRE(s[1].second->data()[0] == Approx(-2.71).epsilon(kRel));
}

TEST_CASE("sgd with Nesterov momentum", "[optim][sgd]") {
    Fixture f;
    auto opt = make_optimizer(sgd(0.9f, true), f.params());
    // v = 0.9 v + g; w -= 0.1 (g + 0.9 v)
    // a[0]: v1 = 0.5,   step 0.5 + 0.45   = 0.95,   w1 = 1 - 0.095      = 0.905
    //       v2 = 0.95,  step 0.5 + 0.855  = 1.355,  w2 = 0.905 - 0.1355 = 0.7695
    //       v3 = 1.355, step 0.5 + 1.2195 = 1.7195, w3 = 0.7695 - 0.17195 = 0.59755
    opt->step(0.1f);
    REQUIRE(f.a.value.data()[0] == Approx(0.905).epsilon(kRel));
    opt->step(0.1f);
    REQUIRE(f.a.value.data()[0] == Approx(0.7695).epsilon(kRel));
    opt->step(0.1f);
    REQUIRE(f.a.value.data()[0] == Approx(0.59755).epsilon(kRel));
    // b (g -1): v -1, -1.9, -2.71; steps -1.9, -2.71, -3.439; w 3.19, 3.461, 3.8049
    REQUIRE(f.b.value.data()[0] == Approx(3.8049).epsilon(kRel));
    REQUIRE(opt->state().size() == 2);
}

TEST_CASE("sgd with weight decay", "[optim][sgd]") {
    SECTION("no momentum") {
        Fixture f;
        auto opt = make_optimizer(sgd(0.0f, false, 0.1f), f.params());
        // g' = g + 0.1 w; w -= 0.1 g'
        // a[0]: g' = 0.5 + 0.1 = 0.6,     w1 = 0.94;  g' = 0.5 + 0.094 = 0.594,    w2 = 0.8806
        // a[1]: g' = 0.25 - 0.2 = 0.05,   w1 = -2.005; g' = 0.25 - 0.2005 = 0.0495, w2 = -2.00995
        // b:    g' = -1 + 0.3 = -0.7,     w1 = 3.07;  g' = -1 + 0.307 = -0.693,    w2 = 3.1393
        opt->step(0.1f);
        REQUIRE(f.a.value.data()[0] == Approx(0.94).epsilon(kRel));
        opt->step(0.1f);
        REQUIRE(f.a.value.data()[0] == Approx(0.8806).epsilon(kRel));
        REQUIRE(f.a.value.data()[1] == Approx(-2.00995).epsilon(kRel));
        REQUIRE(f.b.value.data()[0] == Approx(3.1393).epsilon(kRel));
    }
    SECTION("with momentum") {
        Fixture f;
        auto opt = make_optimizer(sgd(0.9f, false, 0.1f), f.params());
        // a[0]: g'1 = 0.6, v1 = 0.6, w1 = 0.94; g'2 = 0.594, v2 = 0.54 + 0.594 = 1.134, w2 = 0.94 - 0.1134 = 0.8266
        opt->step(0.1f);
        opt->step(0.1f);
        REQUIRE(f.a.value.data()[0] == Approx(0.8266).epsilon(kRel));
        REQUIRE(opt->state()[0].second->data()[0] == Approx(1.134).epsilon(kRel));
    }
}

TEST_CASE("sgd momentum state written through state() is used (checkpoint restore)", "[optim][sgd]") {
    Fixture f;
    auto opt = make_optimizer(sgd(0.9f), f.params());
    opt->state()[0].second->data()[0] = 2.0f;  // as if restored from a checkpoint
    // v = 0.9 * 2 + 0.5 = 2.3; w = 1 - 0.23 = 0.77
    opt->step(0.1f);
    REQUIRE(f.a.value.data()[0] == Approx(0.77).epsilon(kRel));
}

TEST_CASE("adam", "[optim][adam]") {
    Fixture f;
    OptimizerOptions o;
    o.name = "adam";  // beta1 0.9, beta2 0.999, eps 1e-8
    auto opt = make_optimizer(o, f.params());
    REQUIRE(opt->name() == "adam");
    // a[0] starts at 1; gradients 0.5, -1, 0.25 over three steps, lr 0.1.
    // m = 0.9 m + 0.1 g; v = 0.999 v + 0.001 g^2; w -= lr/(1-0.9^t) * m / (sqrt(v)/sqrt(1-0.999^t) + eps)
    // t=1: m = 0.05, v = 0.00025; mhat = 0.05/0.1 = 0.5, sqrt(vhat) = sqrt(0.00025/0.001) = 0.5
    //      w = 1 - 0.1 * 0.5/0.5 = 0.9 (+2e-9 from eps)
    opt->step(0.1f);
    REQUIRE(f.a.value.data()[0] == Approx(0.9).epsilon(kRel));
    // b (g -1) moves by +lr on the first step whatever the gradient's size: 3.1
    REQUIRE(f.b.value.data()[0] == Approx(3.1).epsilon(kRel));
    // t=2, g = -1: m = 0.045 - 0.1 = -0.055, v = 0.00024975 + 0.001 = 0.00124975
    //      mhat = -0.055/0.19 = -0.28947368, vhat = 0.00124975/0.001999 = 0.62518759, sqrt = 0.79068805
    //      w = 0.9 + 0.1 * 0.28947368/0.79068805 = 0.9 + 0.03661035 = 0.93661035
    f.a.grad.data()[0] = -1.0f;
    opt->step(0.1f);
    REQUIRE(f.a.value.data()[0] == Approx(0.93661035).epsilon(kRel));
    // t=3, g = 0.25: m = -0.0495 + 0.025 = -0.0245, v = 0.00124850 + 0.0000625 = 0.00131100
    //      mhat = -0.0245/0.271 = -0.09040590, vhat = 0.00131100/0.002997001 = 0.43743737, sqrt = 0.66139048
    //      w = 0.93661035 + 0.1 * 0.13669066 = 0.95027942
    f.a.grad.data()[0] = 0.25f;
    opt->step(0.1f);
    REQUIRE(f.a.value.data()[0] == Approx(0.95027942).epsilon(kRel));
    REQUIRE(opt->steps_taken() == 3);

    REQUIRE(state_names(*opt) == std::vector<std::string>{"a.exp_avg", "b.exp_avg", "a.exp_avg_sq", "b.exp_avg_sq"});
    auto s = opt->state();
    REQUIRE(s[0].second->data()[0] == Approx(-0.0245).epsilon(kRel));
    // (float 1 - 0.999f is 0.00100005, so v carries a 5e-5 relative rounding error)
    REQUIRE(s[2].second->data()[0] == Approx(0.00131100025).epsilon(1e-4));
}

TEST_CASE("adam with weight decay", "[optim][adam]") {
    Fixture f;
    OptimizerOptions o;
    o.name = "adam";
    o.weight_decay = 0.1f;
    auto opt = make_optimizer(o, f.params());
    // a[0]: t=1: g' = 0.5 + 0.1*1 = 0.6, m = 0.06, v = 0.00036, mhat = 0.6, sqrt(vhat) = 0.6, w = 0.9
    //       t=2: g' = 0.5 + 0.09 = 0.59, m = 0.054 + 0.059 = 0.113, v = 0.00035964 + 0.0003481 = 0.00070774
    //            mhat = 0.113/0.19 = 0.59473684, sqrt(vhat) = sqrt(0.00070774/0.001999) = 0.59502,
    //            w = 0.9 - 0.1 * 0.99952660 = 0.80004734
    opt->step(0.1f);
    opt->step(0.1f);
    REQUIRE(f.a.value.data()[0] == Approx(0.80004734).epsilon(kRel));
}

TEST_CASE("adam resumes bias correction from steps_taken", "[optim][adam]") {
    OptimizerOptions o;
    o.name = "adam";
    Fixture f1;
    auto first = make_optimizer(o, f1.params());
    first->step(0.1f);  // t=1 as in the adam test: a[0] = 0.9

    // A new optimizer restored from the first one's state continues at t=2 (see the adam test: 0.93661035).
    Fixture f2;
    f2.a.value.data()[0] = f1.a.value.data()[0];
    auto second = make_optimizer(o, f2.params());
    auto from = first->state(), to = second->state();
    REQUIRE(from.size() == to.size());
    for (size_t i = 0; i < from.size(); ++i) to[i].second->copy_from(*from[i].second);
    second->set_steps_taken(first->steps_taken());
    f2.a.grad.data()[0] = -1.0f;
    second->step(0.1f);
    REQUIRE(f2.a.value.data()[0] == Approx(0.93661035).epsilon(kRel));
}

TEST_CASE("adadelta", "[optim][adadelta]") {
    OptimizerOptions o;
    o.name = "adadelta";
    o.rho = 0.9f;
    SECTION("lr 1, eps 1e-6 (PyTorch defaults)") {
        Fixture f;
        o.eps = 1e-6f;
        auto opt = make_optimizer(o, f.params());
        REQUIRE(opt->name() == "adadelta");
        // sq = 0.9 sq + 0.1 g^2; d = sqrt(acc + eps)/sqrt(sq + eps) g; acc = 0.9 acc + 0.1 d^2; w -= lr d
        // a[0], g 0.5: t=1: sq = 0.025,  d = 0.001/0.15811704 * 0.5 = 0.00316221, acc = 9.9996e-7,
        //                   w = 0.99683779
        //              t=2: sq = 0.0475, d = sqrt(1.99996e-6)/sqrt(0.047501) * 0.5 = 0.00324436, acc = 1.95255e-6,
        //                   w = 0.99359342
        opt->step(1.0f);
        REQUIRE(f.a.value.data()[0] == Approx(0.99683779).epsilon(kRel));
        REQUIRE(opt->state()[0].second->data()[0] == Approx(0.025).epsilon(kRel));     // a.square_avg
        REQUIRE(opt->state()[2].second->data()[0] == Approx(9.9996e-7).epsilon(1e-4));  // a.acc_delta
        opt->step(1.0f);
        REQUIRE(f.a.value.data()[0] == Approx(0.99359342).epsilon(kRel));
        REQUIRE(opt->state()[2].second->data()[0] == Approx(1.95255237e-6).epsilon(1e-4));
        // t=3, g -2: sq = 0.04275 + 0.4 = 0.44275, d = sqrt(2.95255e-6)/sqrt(0.442751) * -2 = -0.00516475,
        //            w = 0.99875817
        f.a.grad.data()[0] = -2.0f;
        opt->step(1.0f);
        REQUIRE(f.a.value.data()[0] == Approx(0.99875817).epsilon(kRel));
        REQUIRE(state_names(*opt) ==
                std::vector<std::string>{"a.square_avg", "b.square_avg", "a.acc_delta", "b.acc_delta"});
    }
    SECTION("lr 0.5, eps 1e-2 (lr and eps both matter)") {
        Fixture f;
        o.eps = 1e-2f;
        auto opt = make_optimizer(o, f.params());
        // a[0], g 0.5: t=1: sq = 0.025, d = 0.1/sqrt(0.035) * 0.5 = 0.26726124, acc = 0.00714286,
        //                   w = 1 - 0.5 * 0.26726124 = 0.86636938
        //              t=2: sq = 0.0475, d = sqrt(0.01714286)/sqrt(0.0575) * 0.5 = 0.27300945, acc = 0.01388199,
        //                   w = 0.86636938 - 0.13650473 = 0.72986465
        opt->step(0.5f);
        REQUIRE(f.a.value.data()[0] == Approx(0.86636938).epsilon(kRel));
        opt->step(0.5f);
        REQUIRE(f.a.value.data()[0] == Approx(0.72986465).epsilon(kRel));
        REQUIRE(opt->state()[2].second->data()[0] == Approx(0.01388199).epsilon(kRel));
    }
}

TEST_CASE("optimizer state tensors match the parameters' shapes and start at zero", "[optim]") {
    for (const char* name : {"sgd", "adam", "adadelta"}) {
        Fixture f;
        OptimizerOptions o = sgd(0.5f);
        o.name = name;
        auto opt = make_optimizer(o, f.params());
        auto s = opt->state();
        const size_t per_param = std::string(name) == "sgd" ? 1 : 2;
        REQUIRE(s.size() == per_param * 2);
        for (size_t i = 0; i < s.size(); ++i) {
            const Parameter& p = i % 2 == 0 ? f.a : f.b;
            REQUIRE(s[i].first.rfind(p.name + ".", 0) == 0);
            REQUIRE(s[i].second->shape() == p.value.shape());
            for (float v : s[i].second->span()) REQUIRE(v == 0.0f);
        }
        REQUIRE(opt->steps_taken() == 0);
    }
}

TEST_CASE("make_optimizer rejects unknown names and Nesterov without momentum", "[optim]") {
    Fixture f;
    OptimizerOptions o;
    o.name = "rmsprop";
    REQUIRE_THROWS_AS(make_optimizer(o, f.params()), InputError);
    o.name = "SGD";  // names are case-sensitive
    REQUIRE_THROWS_AS(make_optimizer(o, f.params()), InputError);
    REQUIRE_THROWS_AS(make_optimizer(sgd(0.0f, true), f.params()), InputError);
    try {
        o.name = "rmsprop";
        make_optimizer(o, f.params());
    } catch (const InputError& e) {
        REQUIRE_THAT(e.what(), Catch::Contains("rmsprop"));
    }
}

#include <catch2/catch.hpp>

#include <initializer_list>

#include "ringtrain/core/error.hpp"
#include "ringtrain/ops/ops.hpp"

using namespace ringtrain;
using namespace ringtrain::ops;

namespace {
Tensor vec(std::initializer_list<float> v) {
    Tensor t({static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.data());
    return t;
}
void require_values(const Tensor& t, std::initializer_list<double> v, double eps = 1e-6) {
    REQUIRE(t.numel() == static_cast<int64_t>(v.size()));
    int64_t i = 0;
    for (double e : v) {
        CAPTURE(i);
        REQUIRE(t.data()[i++] == Approx(e).epsilon(eps).margin(1e-7));
    }
}
}  // namespace

TEST_CASE("sgd: plain, weight decay, momentum, nesterov", "[ops][optim]") {
    SECTION("plain; velocity untouched without momentum") {
        Tensor w = vec({1.0f, 2.0f}), g = vec({0.5f, -1.0f}), v = vec({7.0f, 7.0f});
        ops::sgd_update(w, g, v, {0.1f, 0.0f, 0.0f, false});
        require_values(w, {0.95, 2.1});
        require_values(v, {7.0, 7.0});
    }
    SECTION("weight decay adds wd * param to the gradient") {
        Tensor w = vec({1.0f, 2.0f}), g = vec({0.5f, -1.0f}), v;
        ops::sgd_update(w, g, v, {0.1f, 0.0f, 0.1f, false});
        require_values(w, {0.94, 2.08});
    }
    SECTION("momentum, two steps") {
        Tensor w = vec({1.0f, 2.0f}), g = vec({0.5f, -1.0f}), v = vec({0.0f, 0.0f});
        ops::sgd_update(w, g, v, {0.1f, 0.9f, 0.0f, false});
        require_values(v, {0.5, -1.0});
        require_values(w, {0.95, 2.1});
        ops::sgd_update(w, g, v, {0.1f, 0.9f, 0.0f, false});
        require_values(v, {0.95, -1.9});
        require_values(w, {0.855, 2.29});
    }
    SECTION("nesterov, two steps") {
        Tensor w = vec({1.0f, 2.0f}), g = vec({0.5f, -1.0f}), v = vec({0.0f, 0.0f});
        ops::sgd_update(w, g, v, {0.1f, 0.9f, 0.0f, true});
        require_values(w, {0.905, 2.19});
        ops::sgd_update(w, g, v, {0.1f, 0.9f, 0.0f, true});
        require_values(v, {0.95, -1.9});
        require_values(w, {0.7695, 2.461});
    }
    SECTION("momentum with weight decay") {
        // g' = g + 0.5 w = [1.0, 0.0]; v = g'; w -= 0.1 v
        Tensor w = vec({1.0f, 2.0f}), g = vec({0.5f, -1.0f}), v = vec({0.0f, 0.0f});
        ops::sgd_update(w, g, v, {0.1f, 0.9f, 0.5f, false});
        require_values(v, {1.0, 0.0});
        require_values(w, {0.9, 2.0});
    }
    Tensor w = vec({1.0f, 2.0f}), g = vec({0.5f}), v = vec({0.0f, 0.0f});
    REQUIRE_THROWS_AS(ops::sgd_update(w, g, v, {}), Error);
}

TEST_CASE("adam: two steps against torch.optim.Adam arithmetic", "[ops][optim]") {
    Tensor w = vec({1.0f, -2.0f, 0.5f}), m = vec({0, 0, 0}), v = vec({0, 0, 0});
    ops::AdamParams p;
    p.lr = 0.1f;
    p.step = 1;
    ops::adam_update(w, vec({0.5f, -0.25f, 0.0f}), m, v, p);
    require_values(w, {0.900000002, -1.900000004, 0.5});
    require_values(m, {0.05, -0.025, 0.0});
    require_values(v, {0.00025, 6.25e-05, 0.0});
    p.step = 2;
    ops::adam_update(w, vec({1.0f, 0.5f, -2.0f}), m, v, p);
    require_values(m, {0.145, 0.0275, -0.2});
    require_values(v, {0.00124975, 0.0003124375, 0.004});
    require_values(w, {0.8034818006385094, -1.9366103557775463, 0.5744136818306456});

    Tensor w2 = vec({1.0f, -2.0f}), m2 = vec({0, 0}), v2 = vec({0, 0});
    p.step = 1;
    p.weight_decay = 0.1f;
    ops::adam_update(w2, vec({0.5f, -0.25f}), m2, v2, p);
    require_values(m2, {0.06, -0.045});
    require_values(w2, {0.9000000016666666, -1.900000002222222});
}

TEST_CASE("adadelta: two steps against torch.optim.Adadelta arithmetic", "[ops][optim]") {
    Tensor w = vec({1.0f, -2.0f, 0.5f}), sq = vec({0, 0, 0}), acc = vec({0, 0, 0});
    ops::AdadeltaParams p;  // lr 1, rho 0.9, eps 1e-6
    ops::adadelta_update(w, vec({0.5f, -0.25f, 0.0f}), sq, acc, p);
    require_values(w, {0.9968377855834876, -1.9968379752916907, 0.5});
    require_values(sq, {0.025, 0.00625, 0.0});
    require_values(acc, {9.99960001599936e-07, 9.998400255959046e-07, 0.0}, 1e-5);
    ops::adadelta_update(w, vec({1.0f, 0.5f, -2.0f}), sq, acc, p);
    require_values(w, {0.9927972323019869, -2.0008783579032245, 0.5031622737073287});
    require_values(sq, {0.1225, 0.030625, 0.4});
    require_values(acc, {2.5325710835045266e-06, 2.5323251877949373e-06, 9.999975000062502e-07}, 1e-5);

    Tensor w2 = vec({1.0f, -2.0f}), sq2 = vec({0, 0}), acc2 = vec({0, 0});
    p.lr = 0.5f;
    p.weight_decay = 0.2f;
    ops::adadelta_update(w2, vec({0.5f, -0.25f}), sq2, acc2, p);
    require_values(sq2, {0.049, 0.04225});
    require_values(w2, {0.9984188773037386, -1.9984188798812859});
}

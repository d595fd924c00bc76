#include <catch2/catch.hpp>

#include <cstdint>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/tensor.hpp"

using namespace ringtrain;

TEST_CASE("tensor allocation is aligned and sized", "[core]") {
    Tensor t({3, 5});
    REQUIRE(t.numel() == 15);
    REQUIRE(t.ndim() == 2);
    REQUIRE(reinterpret_cast<uintptr_t>(t.data()) % 64 == 0);
    t.fill(2.5f);
    for (float v : t.span()) REQUIRE(v == 2.5f);
}

TEST_CASE("reshape shares storage and checks the element count", "[core]") {
    Tensor t = Tensor::zeros({2, 6});
    Tensor r = t.reshape({3, 4});
    r.data()[5] = 7.0f;
    REQUIRE(t.data()[5] == 7.0f);
    REQUIRE_THROWS_AS(t.reshape({5}), Error);
}

TEST_CASE("slice_rows is a view of the right rows", "[core]") {
    Tensor t({4, 3});
    for (int i = 0; i < 12; ++i) t.data()[i] = static_cast<float>(i);
    Tensor s = t.slice_rows(1, 3);
    REQUIRE(s.shape() == Shape{2, 3});
    REQUIRE(s.data()[0] == 3.0f);
    REQUIRE(s.data()[5] == 8.0f);
    REQUIRE_THROWS_AS(t.slice_rows(3, 5), Error);
}

TEST_CASE("clone is deep and resize keeps capacity", "[core]") {
    Tensor t = Tensor::filled({4}, 1.0f);
    Tensor c = t.clone();
    c.data()[0] = 9.0f;
    REQUIRE(t.data()[0] == 1.0f);
    float* before = t.data();
    t.resize({2});
    REQUIRE(t.data() == before);
    REQUIRE(t.numel() == 2);
    t.resize({10});
    REQUIRE(t.numel() == 10);
}

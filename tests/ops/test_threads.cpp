#include <catch2/catch.hpp>

#include "ops_test_util.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/ops/ops.hpp"
#include "ringtrain/ops/threads.hpp"

using namespace ringtrain;
using namespace ops_test;

TEST_CASE("intra-op threads: default 1, validated, same results with 2 threads", "[ops][threads]") {
    REQUIRE(ops::intra_op_threads() == 1);
    REQUIRE_THROWS_AS(ops::set_intra_op_threads(0), InputError);

    Rng rng(51);
    const ops::Conv2dParams cp{2, 1, 1, 2};
    const ops::Pool2dParams pp{3, 3, 2, 2, 1, 1};
    const Tensor x = random_tensor({3, 4, 11, 10}, rng), w = random_tensor({5, 4, 3, 4}, rng), b = random_tensor({5}, rng);
    const Shape ys = ops::conv2d_output_shape(x.shape(), w.shape(), cp);
    const Tensor dy = random_tensor(ys, rng);
    const Shape ps = ops::pool2d_output_shape(x.shape(), pp);
    const Tensor dpy = random_tensor(ps, rng);
    auto run = [&](std::vector<Tensor>& out) {
        ops::Workspace ws;
        Tensor y(ys), dx(x.shape()), dw(w.shape()), db({5}), py(ps), pdx(x.shape());
        ops::conv2d_forward(x, w, b, y, cp, ws);
        ops::conv2d_backward_data(dy, w, dx, cp, ws);
        ops::conv2d_backward_filter(x, dy, dw, db, cp, ws);
        ops::maxpool2d_forward(x, py, pp);
        ops::maxpool2d_backward(x, py, dpy, pdx, pp);
        out = {y, dx, dw, db, py, pdx};
    };
    std::vector<Tensor> one, two;
    run(one);
    ops::set_intra_op_threads(2);
    REQUIRE(ops::intra_op_threads() == 2);
    run(two);
    ops::set_intra_op_threads(1);
    for (size_t i = 0; i < one.size(); ++i) {
        CAPTURE(i);
        REQUIRE_CLOSE(two[i], to_double(one[i]), 1e-5, 1e-5);
    }
}

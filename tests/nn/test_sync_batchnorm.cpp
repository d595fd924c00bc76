// Synchronised BatchNorm without MPI: "ranks" are threads of this process whose BatchStatsReducer is an in-process
// allreduce. Checked: N ranks x their batches equal one BatchNorm over all batches together (outputs, input
// gradients, summed parameter gradients, running stats; uneven shares too), a finite-difference gradient check of
// the loss summed over two ranks, how many sums each pass issues, and the global-count rule for batch 1 per rank.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "gradient_check.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/batch_stats_reducer.hpp"
#include "ringtrain/nn/layers.hpp"
#include "support/thread_group.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;

namespace {

// The in-process allreduce (support/thread_group.hpp) as each rank's BatchStatsReducer.
class InProcessGroup {
public:
    explicit InProcessGroup(int n) : sum_(n) {
        for (int r = 0; r < n; ++r) members_.emplace_back(Member(&sum_, r));
    }
    BatchStatsReducer& member(int rank) { return members_[static_cast<size_t>(rank)]; }
    int64_t rounds() const { return sum_.rounds(); }

private:
    struct Member : BatchStatsReducer {
        Member(rt_test::ThreadSum* s, int r) : group(s), rank(r) {}
        void sum(std::span<double> values) override { group->sum(rank, values); }
        rt_test::ThreadSum* group;
        int rank;
    };
    rt_test::ThreadSum sum_;
    std::vector<Member> members_;
};


// `n` BatchNorm layers built alike (same name, momentum, gamma/beta), one per rank.
std::vector<std::unique_ptr<BatchNorm>> layers_alike(int n, int dims, const Shape& sample, InProcessGroup* group) {
    std::vector<std::unique_ptr<BatchNorm>> v;
    for (int r = 0; r < n; ++r) {
        v.push_back(std::make_unique<BatchNorm>(dims, 0.2f, 1e-5f));
        gradcheck::build(*v.back(), sample, 7, "bn");
        Rng rng(11);  // the same values on every rank
        for (float& g : v.back()->parameters()[0]->value.span()) g = rng.uniform(0.5f, 1.5f);
        for (float& b : v.back()->parameters()[1]->value.span()) b = rng.uniform(-0.5f, 0.5f);
        if (group) v.back()->set_stats_reducer(&group->member(r));
    }
    return v;
}

void require_close(const Tensor& a, const Tensor& b, double tol) {
    REQUIRE(a.numel() == b.numel());
    for (int64_t i = 0; i < a.numel(); ++i) REQUIRE(a.data()[i] == Approx(b.data()[i]).margin(tol).epsilon(tol));
}

// Ranks hold rows [begin[r], begin[r+1]) of one batch; the synchronised layers must act as one layer on all rows.
void check_equals_one_batch(int dims, const Shape& sample, const std::vector<int64_t>& begin) {
    const int n = static_cast<int>(begin.size()) - 1;
    const int64_t rows = begin.back();
    InProcessGroup group(n);
    auto ranks = layers_alike(n, dims, sample, &group);
    auto whole = layers_alike(1, dims, sample, nullptr);
    Rng rng(5);
    for (int step = 0; step < 3; ++step) {
        Tensor x = gradcheck::random_tensor(gradcheck::batched(rows, sample), rng, -1.0f + step, 2.0f + step);
        Tensor dy = gradcheck::random_tensor(x.shape(), rng);
        Tensor y, dx;
        whole[0]->forward(x, y, ForwardContext{true, &rng});
        whole[0]->backward(x, y, dy, &dx, false);
        std::vector<Tensor> xs(n), ys(n), dys(n), dxs(n);
        for (int r = 0; r < n; ++r) {
            xs[r] = x.slice_rows(begin[r], begin[r + 1]).clone();
            dys[r] = dy.slice_rows(begin[r], begin[r + 1]).clone();
        }
        rt_test::on_threads(n, [&](int r) {
            Rng ctx(1);
            ranks[r]->forward(xs[r], ys[r], ForwardContext{true, &ctx});
            ranks[r]->backward(xs[r], ys[r], dys[r], &dxs[r], false);
        });
        for (int r = 0; r < n; ++r) {
            require_close(ys[r], y.slice_rows(begin[r], begin[r + 1]), 1e-5);
            require_close(dxs[r], dx.slice_rows(begin[r], begin[r + 1]), 1e-5);
            for (size_t b = 0; b < 2; ++b)  // identical on every rank, as one layer's
                require_close(ranks[r]->buffers()[b]->value, whole[0]->buffers()[b]->value, 1e-6);
        }
        // Each rank's gamma/beta gradient is its share; the gradient sync adds the shares.
        for (size_t p = 0; p < 2; ++p) {
            Tensor sum = Tensor::zeros(whole[0]->parameters()[p]->grad.shape());
            for (int r = 0; r < n; ++r)
                for (int64_t i = 0; i < sum.numel(); ++i) sum.data()[i] += ranks[r]->parameters()[p]->grad.data()[i];
            require_close(sum, whole[0]->parameters()[p]->grad, 1e-5);
        }
    }
}

}  // namespace

TEST_CASE("synchronised batchnorm2d on 2 ranks x B equals batchnorm2d on 2B", "[nn][batchnorm][syncbn]") {
    check_equals_one_batch(2, {3, 2, 3}, {0, 4, 8});
}

TEST_CASE("synchronised batchnorm on 3 ranks with uneven shares equals one batch", "[nn][batchnorm][syncbn]") {
    check_equals_one_batch(2, {2, 3, 3}, {0, 1, 4, 6});
    check_equals_one_batch(1, {4}, {0, 2, 3, 7});
    check_equals_one_batch(1, {3, 5}, {0, 2, 4, 6});
}

TEST_CASE("synchronised batchnorm gradients over two ranks (finite differences)", "[nn][batchnorm][syncbn][gradcheck]") {
    InProcessGroup group(2);
    auto ranks = layers_alike(2, 2, {2, 2, 3}, &group);
    Rng rng(17);
    std::vector<Tensor> xs = {gradcheck::random_tensor({2, 2, 2, 3}, rng), gradcheck::random_tensor({3, 2, 2, 3}, rng)};
    std::vector<Tensor> dys = {gradcheck::random_tensor(xs[0].shape(), rng), gradcheck::random_tensor(xs[1].shape(), rng)};
    std::vector<Tensor> ys(2), dxs(2);
    // L = sum over ranks of sum(y_r * dy_r): what the ranks' losses add up to.
    auto loss = [&] {
        rt_test::on_threads(2, [&](int r) {
            Rng ctx(1);
            ranks[r]->forward(xs[r], ys[r], ForwardContext{true, &ctx});
        });
        return gradcheck::dot(ys[0], dys[0]) + gradcheck::dot(ys[1], dys[1]);
    };
    loss();
    rt_test::on_threads(2, [&](int r) { ranks[r]->backward(xs[r], ys[r], dys[r], &dxs[r], false); });
    std::vector<Tensor> analytic_dx = {dxs[0].clone(), dxs[1].clone()};
    std::vector<Tensor> analytic_param;  // summed over ranks
    for (size_t p = 0; p < 2; ++p) {
        Tensor s = ranks[0]->parameters()[p]->grad.clone();
        for (int64_t i = 0; i < s.numel(); ++i) s.data()[i] += ranks[1]->parameters()[p]->grad.data()[i];
        analytic_param.push_back(s);
    }

    gradcheck::Options o;
    o.eps = 5e-3;
    o.abs_tol = 2e-3;
    gradcheck::Report rep;
    for (int r = 0; r < 2; ++r) {
        const auto num = gradcheck::numeric_gradient(xs[r], o.eps, loss);
        for (int64_t i = 0; i < xs[r].numel(); ++i)
            gradcheck::compare(rep, o, "dx" + std::to_string(r), i, analytic_dx[r].data()[i], num[i]);
    }
    // gamma and beta are one parameter held by every rank: perturb both copies together.
    for (size_t p = 0; p < 2; ++p) {
        Tensor& v0 = ranks[0]->parameters()[p]->value;
        Tensor& v1 = ranks[1]->parameters()[p]->value;
        for (int64_t i = 0; i < v0.numel(); ++i) {
            const float orig = v0.data()[i];
            v0.data()[i] = v1.data()[i] = static_cast<float>(orig + o.eps);
            const double lp = loss();
            v0.data()[i] = v1.data()[i] = static_cast<float>(orig - o.eps);
            const double lm = loss();
            v0.data()[i] = v1.data()[i] = orig;
            const double step = double(static_cast<float>(orig + o.eps)) - double(static_cast<float>(orig - o.eps));
            gradcheck::compare(rep, o, p == 0 ? "gamma" : "beta", i, analytic_param[p].data()[i], (lp - lm) / step);
        }
    }
    REQUIRE_GRADIENTS_OK(rep);
}

TEST_CASE("synchronised batchnorm: sums per pass, evaluation alone, and the global count", "[nn][batchnorm][syncbn]") {
    InProcessGroup group(2);
    auto ranks = layers_alike(2, 1, {3}, &group);
    REQUIRE(ranks[0]->synchronised());
    Rng rng(3);
    // One sample per rank: plain BatchNorm refuses it (one value per channel), synchronised it sees two.
    std::vector<Tensor> xs = {gradcheck::random_tensor({1, 3}, rng), gradcheck::random_tensor({1, 3}, rng)};
    std::vector<Tensor> ys(2), dxs(2);
    rt_test::on_threads(2, [&](int r) {
        Rng ctx(1);
        ranks[r]->forward(xs[r], ys[r], ForwardContext{true, &ctx});
    });
    CHECK(group.rounds() == 2);  // the sums and count, then the squares about the global mean
    // Two values per channel: normalised, they are -1 and +1 (up to eps), and gamma/beta are alike on both ranks.
    for (int64_t c = 0; c < 3; ++c) {
        const float g = ranks[0]->parameters()[0]->value.data()[c], b = ranks[0]->parameters()[1]->value.data()[c];
        CHECK((ys[0].data()[c] - b) / g == Approx(-(ys[1].data()[c] - b) / g).margin(1e-4));
        CHECK(std::fabs((ys[0].data()[c] - b) / g) == Approx(1.0).epsilon(1e-3));
    }
    rt_test::on_threads(2, [&](int r) { ranks[r]->backward(xs[r], ys[r], ys[r], &dxs[r], false); });
    CHECK(group.rounds() == 3);  // one sum of (sum dy, sum dy*xhat, count)
    // A layer whose input needs no gradient issues no sum in backward (on every rank alike).
    rt_test::on_threads(2, [&](int r) { ranks[r]->backward(xs[r], ys[r], ys[r], nullptr, false); });
    CHECK(group.rounds() == 3);
    // Evaluation uses the running stats: no sums, and one rank may evaluate alone.
    ranks[0]->forward(xs[0], ys[0], ForwardContext{false, nullptr});
    ranks[0]->backward(xs[0], ys[0], ys[0], &dxs[0], false);
    CHECK(group.rounds() == 3);
    // Plain BatchNorm at batch 1 still refuses training.
    auto plain = layers_alike(1, 1, {3}, nullptr);
    Rng ctx(1);
    REQUIRE_THROWS_AS(plain[0]->forward(xs[0], ys[0], ForwardContext{true, &ctx}), InputError);
}

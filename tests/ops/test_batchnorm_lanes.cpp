// The CPU BatchNorm op against a double-precision reference written out plainly, at channel sizes around the op's
// 16-lane blocks (S = 1, 15, 16, 37: no block, tail only, one block, blocks and a tail) and with means far from zero
// next to small spreads (where a careless variance or x * scale + shift cancels): statistics, running stats, y, dx,
// dgamma and dbeta. The backward reads the mean saved as a float (as PyTorch and cuDNN save it), whose rounding
// moves every xhat by ulp(mean) / std: checked at mean / spread = 100, the forward alone at 100,000.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "ops_test_util.hpp"
#include "ringtrain/ops/ops.hpp"

using namespace ringtrain;
using namespace ops_test;

namespace {

struct Reference {
    std::vector<double> mean, inv, y, dx, dgamma, dbeta;
};

// Training-mode BatchNorm over x [N, C, S] in double, the textbook formulas.
Reference reference(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta, double eps) {
    const int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / (N * C);
    const double M = double(N * S);
    Reference r;
    r.y.resize(size_t(x.numel()));
    r.dx.resize(size_t(x.numel()));
    auto at = [&](int64_t n, int64_t c, int64_t k) { return size_t((n * C + c) * S + k); };
    for (int64_t c = 0; c < C; ++c) {
        double s = 0, ss = 0, sdy = 0, sdyx = 0;
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < S; ++k) s += x.data()[at(n, c, k)];
        const double mu = s / M;
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < S; ++k) ss += std::pow(x.data()[at(n, c, k)] - mu, 2);
        const double inv = 1.0 / std::sqrt(ss / M + eps);
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < S; ++k) {
                const double xhat = (x.data()[at(n, c, k)] - mu) * inv, d = dy.data()[at(n, c, k)];
                r.y[at(n, c, k)] = gamma.data()[c] * xhat + beta.data()[c];
                sdy += d;
                sdyx += d * xhat;
            }
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < S; ++k) {
                const double xhat = (x.data()[at(n, c, k)] - mu) * inv, d = dy.data()[at(n, c, k)];
                r.dx[at(n, c, k)] = gamma.data()[c] * inv * (d - sdy / M - xhat * sdyx / M);
            }
        r.mean.push_back(mu);
        r.inv.push_back(inv);
        r.dgamma.push_back(sdyx);
        r.dbeta.push_back(sdy);
    }
    return r;
}

}  // namespace

TEST_CASE("CPU batchnorm equals a double reference across its lane blocks, means far from zero included",
          "[ops][batchnorm]") {
    Rng rng(41);
    for (int64_t S : {1, 15, 16, 37}) {
        struct Spread {
            float offset, width;
            bool backward;
        };
        for (const Spread sp : {Spread{0.0f, 1.0f, true}, Spread{50.0f, 0.5f, true}, Spread{1000.0f, 0.01f, false}}) {
            CAPTURE(S, sp.offset, sp.width);
            const int64_t N = S == 1 ? 5 : 3, C = 3;
            Tensor x = random_tensor({N, C, S, 1}, rng, -1.0f, 1.0f);
            for (float& v : x.span()) v = sp.offset + sp.width * v;
            const Tensor dy = random_tensor(x.shape(), rng), gamma = random_tensor({C}, rng, 0.5f, 1.5f);
            const Tensor beta = random_tensor({C}, rng);
            Tensor y(x.shape()), mean({C}), inv_std({C}), rmean = Tensor::zeros({C}), rvar = Tensor::filled({C}, 1.0f);
            Tensor dx(x.shape()), dgamma({C}), dbeta({C});
            const ops::BatchNormParams p{0.1f, 1e-5f, true};
            ops::batchnorm_forward(x, gamma, beta, y, mean, inv_std, rmean, rvar, p);
            ops::batchnorm_backward(x, dy, gamma, mean, inv_std, dx, dgamma, dbeta, /*batch_stats=*/true);
            const Reference r = reference(x, dy, gamma, beta, 1e-5);
            REQUIRE_CLOSE(mean, r.mean, 1e-6, 1e-7);
            REQUIRE_CLOSE(inv_std, r.inv, 1e-6, 1e-5);
            REQUIRE_CLOSE(y, r.y, 1e-4, 1e-4);
            if (sp.backward) {
                REQUIRE_CLOSE(dx, r.dx, 1e-4, 1e-4);
                REQUIRE_CLOSE(dgamma, r.dgamma, 1e-4, 1e-5);
                REQUIRE_CLOSE(dbeta, r.dbeta, 1e-5, 1e-6);
            }
            for (int64_t c = 0; c < C; ++c) REQUIRE(rmean.data()[c] == Approx(0.1 * r.mean[size_t(c)]).epsilon(1e-6));
        }
    }
}

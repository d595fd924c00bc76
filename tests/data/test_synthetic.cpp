#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/synthetic.hpp"

using namespace ringtrain;
using namespace ringtrain::data;

TEST_CASE("synthetic data is deterministic and labels are in range", "[data][synthetic]") {
    SyntheticDataset a({2, 3, 4}, 5, 100, 42), b({2, 3, 4}, 5, 100, 42), c({2, 3, 4}, 5, 100, 43);
    REQUIRE(a.size() == 100);
    REQUIRE(a.sample_shape() == Shape{2, 3, 4});
    REQUIRE(a.num_classes() == 5);
    std::vector<float> xa(24), xb(24), xc(24);
    std::vector<int> counts(5, 0);
    int differ_seed = 0;
    for (int64_t i = 0; i < 100; ++i) {
        const float ya = a.read(i, xa.data());
        REQUIRE(ya == b.read(i, xb.data()));
        REQUIRE(xa == xb);
        REQUIRE(ya == float(a.label(i)));
        REQUIRE(ya >= 0);
        REQUIRE(ya < 5);
        counts[int(ya)]++;
        c.read(i, xc.data());
        differ_seed += xa != xc;
    }
    REQUIRE(differ_seed == 100);
    for (int n : counts) REQUIRE(n > 5);
    std::vector<float> x0(24), x1(24);
    a.read(0, x0.data());
    a.read(1, x1.data());
    REQUIRE(x0 != x1);
}

TEST_CASE("synthetic first_index selects a window of the same stream", "[data][synthetic]") {
    SyntheticOptions o;
    o.sample_shape = {10};
    o.size = 50;
    o.seed = 9;
    SyntheticDataset whole(o);
    o.first_index = 20;
    o.size = 30;
    SyntheticDataset tail(o);
    std::vector<float> x(10), y(10);
    for (int64_t i = 0; i < 30; ++i) {
        REQUIRE(whole.read(20 + i, x.data()) == tail.read(i, y.data()));
        REQUIRE(x == y);
    }
}

TEST_CASE("synthetic labels are learnable: nearest class mean generalises", "[data][synthetic]") {
    SyntheticOptions o;
    o.sample_shape = {1, 28, 28};
    o.num_classes = 10;
    o.size = 1000;
    o.seed = 3;
    SyntheticDataset train(o);
    o.first_index = 1000;
    o.size = 500;
    SyntheticDataset test(o);
    const int64_t d = 784;
    std::vector<double> mean(10 * d, 0.0);
    std::vector<int> count(10, 0);
    std::vector<float> x(d);
    double sum = 0, sum2 = 0;
    for (int64_t i = 0; i < train.size(); ++i) {
        const int y = int(train.read(i, x.data()));
        count[y]++;
        for (int64_t j = 0; j < d; ++j) {
            mean[y * d + j] += x[j];
            sum += x[j];
            sum2 += double(x[j]) * x[j];
        }
    }
    const double n = double(train.size() * d);
    REQUIRE(std::abs(sum / n) < 0.05);
    REQUIRE(std::sqrt(sum2 / n) == Approx(std::sqrt(1.0 + 0.25)).epsilon(0.05));  // noise 1, separation 0.5
    for (int c = 0; c < 10; ++c)
        for (int64_t j = 0; j < d; ++j) mean[c * d + j] /= std::max(count[c], 1);
    int correct = 0;
    for (int64_t i = 0; i < test.size(); ++i) {
        const int y = int(test.read(i, x.data()));
        int best = -1;
        double best_d = 1e300;
        for (int c = 0; c < 10; ++c) {
            double dist = 0;
            for (int64_t j = 0; j < d; ++j) dist += (x[j] - mean[c * d + j]) * (x[j] - mean[c * d + j]);
            if (dist < best_d) best_d = dist, best = c;
        }
        correct += best == y;
    }
    REQUIRE(correct > 0.95 * test.size());
}

TEST_CASE("synthetic data rejects bad options", "[data][synthetic]") {
    REQUIRE_THROWS_AS(SyntheticDataset({1, 0, 2}, 10, 10, 0), InputError);
    REQUIRE_THROWS_AS(SyntheticDataset({4}, 1, 10, 0), InputError);
    REQUIRE_THROWS_AS(SyntheticDataset({4}, 2, 0, 0), InputError);
}

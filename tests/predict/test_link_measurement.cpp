// predict::measure_link over a link that has a token bucket, as `tc tbf` and virtual NICs shape: the sizes it times
// (link_sizes, largest first) must see the sustained rate a training run sees, not the bucket's burst.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/predict/link_measurement.hpp"

#include "rank0_of_two.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// One process standing for rank 0 of two over a shaped link: an allreduce of n bytes sends n (recursive doubling and
// the ring both do at two ranks), through a bucket of `burst` bytes, full at the start, that refills at `rate`
// bytes/s; bytes above what the bucket holds go at the rate. The bucket runs on the link's own clock (the modelled
// transfer times, and `gap` between calls), so it holds the same bytes however the test is scheduled: a preempted
// spin only makes that call slower, which measure_link's fastest-of-9 leaves out. The time is spent spinning, so the
// caller's clock sees it.
class TokenBucketLink final : public rt_predict_test::Rank0OfTwo {
public:
    TokenBucketLink(double rate_bytes_per_s, double burst_bytes, double gap_s)
        : rate_(rate_bytes_per_s), burst_(burst_bytes), gap_s_(gap_s), tokens_(burst_bytes) {}

    std::string backend() const override { return "token-bucket"; }
    using Rank0OfTwo::allreduce;
    void allreduce(std::span<float> data, ringtrain::comm::ReduceOp) override { send(data.size_bytes()); }

private:
    void send(double bytes) {
        tokens_ = std::min(burst_, tokens_ + rate_ * gap_s_);
        const double from_bucket = std::min(tokens_, bytes);
        tokens_ -= from_bucket;
        const double seconds = 0.2e-6 + (bytes - from_bucket) / rate_;  // 0.2 µs a message, the rest at the rate
        const Clock::time_point until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                           std::chrono::duration<double>(seconds));
        while (Clock::now() < until) {
        }
    }

    double rate_, burst_, gap_s_, tokens_;
};

double fitted_rate(const std::vector<double>& sizes, double rate, double burst) {
    // 0.5 µs between collectives: the emulated hosts' ~50 µs barrier at 100 Mbit/s, scaled as the rate is (80x).
    TokenBucketLink link(rate, burst, 0.5e-6);
    const auto m = ringtrain::predict::measure_link(link, sizes, 9, ringtrain::scaling::Algorithm::Auto);
    REQUIRE(m.link.beta_s_per_byte > 0);
    return 1.0 / m.link.beta_s_per_byte;
}

}  // namespace

TEST_CASE("link_sizes: 16 MiB down to 4 KiB by factors of 4, largest first", "[predict]") {
    const std::vector<double> s = ringtrain::predict::link_sizes();
    REQUIRE(s.size() == 7);
    CHECK(s.front() == 16.0 * 1048576);
    CHECK(s.back() == 4096);
    CHECK(std::is_sorted(s.rbegin(), s.rend()));
}

TEST_CASE("measure_link over a token bucket: link_sizes' order fits the sustained rate", "[predict]") {
    // 1 GB/s with a 256 KiB bucket: a 100 Mbit/s tbf of the emulated hosts scaled 80x, so that 16 MiB takes 17 ms.
    const double rate = 1e9, burst = 256.0 * 1024;
    const double largest_first = fitted_rate(ringtrain::predict::link_sizes(), rate, burst);
    CHECK(largest_first == Approx(rate).epsilon(0.25));
    // The same sizes smallest first: the first ones go out of a full bucket, and the fit takes them for the link. This
    // is what --measure did before; the check shows the test can tell the two apart.
    std::vector<double> smallest_first = ringtrain::predict::link_sizes();
    std::reverse(smallest_first.begin(), smallest_first.end());
    CHECK(fitted_rate(smallest_first, rate, burst) > 2.0 * rate);
}

// The α-β step model (see the header and docs/scaling.md).
#include "ringtrain/scaling/scaling_model.hpp"

#include <algorithm>
#include <cmath>

#include "ringtrain/core/error.hpp"

namespace ringtrain::scaling {

const char* to_string(Algorithm a) {
    switch (a) {
        case Algorithm::Ring: return "ring";
        case Algorithm::RecursiveDoubling: return "recursive_doubling";
        case Algorithm::HalvingDoubling: return "halving_doubling";
    }
    return "?";
}

CollectiveTime allreduce_time(Algorithm a, int ranks, double bytes, const Link& link) {
    CollectiveTime t;
    if (ranks < 2 || bytes <= 0) return t;
    const double n = ranks;
    // Non-powers of two take one more round (the ranks beyond the power fold in first): ceil, not log2.
    const double rounds = std::ceil(std::log2(n));
    switch (a) {
        case Algorithm::Ring:  // reduce-scatter + allgather: 2(N-1) messages of n/N bytes each
            t.latency_s = 2 * (n - 1) * link.alpha_s;
            t.bandwidth_s = 2 * (n - 1) / n * bytes * link.beta_s_per_byte;
            break;
        case Algorithm::RecursiveDoubling:  // log2 N rounds, each exchanging the whole vector
            t.latency_s = rounds * link.alpha_s;
            t.bandwidth_s = rounds * bytes * link.beta_s_per_byte;
            break;
        case Algorithm::HalvingDoubling:  // Rabenseifner: recursive-halving reduce-scatter + recursive-doubling allgather
            t.latency_s = 2 * rounds * link.alpha_s;
            t.bandwidth_s = 2 * (n - 1) / n * bytes * link.beta_s_per_byte;
            break;
    }
    return t;
}

std::string Setting::describe() const {
    std::string s = to_string(algorithm);
    s += wire_bytes_per_float < 4 ? " 16-bit" : " fp32";
    if (local_sgd_period > 0)
        s += " local_sgd/" + std::to_string(local_sgd_period);
    else
        s += overlap ? " overlap" : " no-overlap";
    return s;
}

std::string dominant_term(const Terms& t) {
    const std::pair<const char*, double> terms[] = {{"compute", t.compute},       {"input", t.input},
                                                    {"optimizer", t.optimizer},   {"straggler", t.straggler},
                                                    {"communication", t.communication}, {"latency", t.latency}};
    const auto* best = std::max_element(std::begin(terms), std::end(terms),
                                        [](const auto& a, const auto& b) { return a.second < b.second; });
    return best->first;
}

Prediction predict_step(const StepTimings& t, const sync::BucketLayout& layout, const Link& link, const Setting& s,
                        int ranks, int64_t batch_per_rank, std::span<const double> bucket_seconds) {
    if (!bucket_seconds.empty() && bucket_seconds.size() != layout.size())
        throw Error("predict_step: " + std::to_string(bucket_seconds.size()) + " bucket times for " +
                    std::to_string(layout.size()) + " buckets");
    if (ranks < 1) throw InputError("predict: ranks must be at least 1 (got " + std::to_string(ranks) + ")");
    if (t.grad_floats.size() != layout.gradients() || t.ready_s.size() != t.grad_floats.size())
        throw Error("predict_step: the timings describe " + std::to_string(t.grad_floats.size()) +
                    " gradients, the layout " + std::to_string(layout.gradients()));
    Prediction p;
    p.ranks = ranks;
    p.batch_per_rank = batch_per_rank;
    p.setting = s;
    p.terms.input = t.input_s;
    p.terms.compute = t.forward_s + t.backward_s;
    p.terms.optimizer = t.optimizer_s;
    const double one_rank_step = t.compute_s();
    double step = one_rank_step;
    if (ranks > 1) {
        // The job moves at the slowest rank's pace: every collective waits for it.
        const double slow = 1.0 + std::max(0.0, s.straggler);
        p.terms.straggler = (slow - 1.0) * one_rank_step;
        const double backward_begin = slow * (t.input_s + t.forward_s);
        const double backward_end = backward_begin + slow * t.backward_s;
        // Local SGD averages after the optimizer; otherwise the first bucket may start as soon as it is ready.
        double previous_end = s.local_sgd_period > 0 ? backward_end + slow * t.optimizer_s : backward_begin;
        double latency = 0, total = 0;
        const double comm_begin = previous_end;
        for (size_t k = 0; k < layout.size(); ++k) {
            const sync::Bucket& b = layout.bucket(k);
            double ready = backward_end;
            if (s.overlap && s.local_sgd_period == 0) {
                ready = backward_begin;
                for (const sync::BucketSlot& slot : b.slots) {
                    const double r = t.ready_s[slot.param];
                    ready = std::max(ready, r >= 0 ? backward_begin + slow * r : backward_end);
                }
            }
            CollectiveTime c = allreduce_time(s.algorithm, ranks, b.count * s.wire_bytes_per_float, link);
            if (!bucket_seconds.empty()) {  // measured: the link only says how much of it is latency
                c.latency_s = std::min(c.latency_s, std::max(0.0, bucket_seconds[k]));
                c.bandwidth_s = std::max(0.0, bucket_seconds[k]) - c.latency_s;
            }
            previous_end = std::max(ready, previous_end) + c.total();
            p.bucket_end_s.push_back(previous_end);
            latency += c.latency_s;
            total += c.total();
        }
        double exposed = 0;
        if (s.local_sgd_period > 0) {  // a blocking parameter average, paid once per period
            exposed = (previous_end - comm_begin) / s.local_sgd_period;
            step = slow * one_rank_step + exposed;
        } else {
            exposed = std::max(0.0, previous_end - backward_end);
            step = std::max(previous_end, backward_end) + slow * t.optimizer_s;
        }
        const double latency_share = total > 0 ? latency / total : 0.0;
        p.terms.latency = exposed * latency_share;
        p.terms.communication = exposed - p.terms.latency;
    }
    p.step_s = step;
    p.samples_per_s = step > 0 ? static_cast<double>(batch_per_rank) * ranks / step : 0.0;
    p.efficiency = step > 0 ? one_rank_step / step : 0.0;
    p.dominant = dominant_term(p.terms);
    return p;
}

nlohmann::json terms_json(const Terms& terms) {
    return {{"input", terms.input},         {"compute", terms.compute},
            {"optimizer", terms.optimizer}, {"straggler", terms.straggler},
            {"communication", terms.communication}, {"latency", terms.latency}};
}

}  // namespace ringtrain::scaling

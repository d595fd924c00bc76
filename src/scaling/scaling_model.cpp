// The α-β step model (see the header and docs/scaling.md).
#include "ringtrain/scaling/scaling_model.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ringtrain/comm/ring_communicator.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::scaling {

const char* to_string(Algorithm a) {
    switch (a) {
        case Algorithm::Auto: return "auto";
        case Algorithm::Ring: return "ring";
        case Algorithm::RecursiveDoubling: return "recursive_doubling";
        case Algorithm::HalvingDoubling: return "halving_doubling";
    }
    return "?";
}

Algorithm algorithm_of_backend(const std::string& backend) { return backend == "ring" ? Algorithm::Auto : Algorithm::Ring; }

Algorithm ring_backend_choice(int ranks, double float32_bytes) {
    using Path = comm::RingCommunicator::Path;
    const auto floats = static_cast<size_t>(std::max(0.0, float32_bytes) / sizeof(float));
    switch (comm::RingCommunicator::mpi_path(floats, ranks, comm::RingOptions{})) {  // the backend's own rule
        case Path::RecursiveDoubling: return Algorithm::RecursiveDoubling;
        case Path::HalvingDoubling: return Algorithm::HalvingDoubling;
        case Path::Ring:
        case Path::SharedMemory: break;
    }
    return Algorithm::Ring;
}

CollectiveTime allreduce_time(Algorithm a, int ranks, double bytes, const Link& link, double float32_bytes) {
    CollectiveTime t;
    if (ranks < 2 || bytes <= 0) return t;
    if (a == Algorithm::Auto) a = ring_backend_choice(ranks, float32_bytes > 0 ? float32_bytes : bytes);
    const double n = ranks;
    // log2 N exchanges of the whole vector; a world that is not a power of two P first folds its extra ranks into
    // partners and sends them the result at the end (RingCommunicator::recursive_doubling): log2 P + 2.
    const bool power_of_two = (ranks & (ranks - 1)) == 0;
    const double rounds = power_of_two ? std::log2(n) : std::floor(std::log2(n)) + 2;
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
        case Algorithm::Auto: break;  // resolved above
    }
    return t;
}

Link fit_link(std::span<const LinkSample> samples, int ranks, Algorithm a, std::string source) {
    if (ranks < 2) throw Error("fit_link: a link is fitted from allreduces between two or more ranks");
    // t ≈ A·α + B·β, A and B the algorithm's latency and bandwidth factors for the sample's size (its time over a
    // link of α = 1 s, β = 1 s/byte, split as allreduce_time splits it); normal equations.
    Link unit;
    unit.alpha_s = 1;
    unit.beta_s_per_byte = 1;
    double aa = 0, ab = 0, bb = 0, at = 0, bt = 0;
    std::vector<double> sizes;
    for (const LinkSample& s : samples) {
        const CollectiveTime factors = allreduce_time(a, ranks, s.bytes, unit, s.float32_bytes);
        const double A = factors.latency_s, B = factors.bandwidth_s;
        const double w = 1.0 / std::max(s.seconds * s.seconds, 1e-18);
        aa += w * A * A, ab += w * A * B, bb += w * B * B, at += w * A * s.seconds, bt += w * B * s.seconds;
        sizes.push_back(s.bytes);
    }
    std::sort(sizes.begin(), sizes.end());
    if (std::unique(sizes.begin(), sizes.end()) - sizes.begin() < 2)
        throw Error("fit_link: needs allreduces of two or more sizes");
    Link link;
    const double det = aa * bb - ab * ab;
    link.alpha_s = det > 0 ? (at * bb - bt * ab) / det : -1;
    link.beta_s_per_byte = det > 0 ? (bt * aa - at * ab) / det : -1;
    if (link.alpha_s < 0) {  // all of it bandwidth
        link.alpha_s = 0;
        link.beta_s_per_byte = bb > 0 ? std::max(0.0, bt / bb) : 0.0;
    } else if (link.beta_s_per_byte < 0) {  // all of it latency
        link.beta_s_per_byte = 0;
        link.alpha_s = aa > 0 ? std::max(0.0, at / aa) : 0.0;
    }
    link.source = std::move(source);
    return link;
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
                                                    {"communication", t.communication}, {"latency", t.latency},
                                                    {"contention", t.contention}};
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
        const double backward_work = slow * t.backward_s;  // backward's seconds with nothing beside it
        const double backward_end_alone = backward_begin + backward_work;
        const bool local_sgd = s.local_sgd_period > 0;
        // Contention applies while a bucket is in flight during backward; local SGD averages after the optimizer.
        const double slow_compute = local_sgd ? 1.0 : std::max(1.0, s.contention.compute);
        const double slow_comm = local_sgd ? 1.0 : std::max(1.0, s.contention.communication);
        // Walked bucket by bucket: `now` is when the last allreduce ended, `done` how much of backward's work was
        // done by then, and `backward_end` when all of it was (< 0 until then).
        double now = local_sgd ? backward_end_alone + slow * t.optimizer_s : backward_begin;
        double done = local_sgd ? backward_work : 0.0;
        double backward_end = local_sgd || backward_work <= 0 ? backward_end_alone : -1.0;
        const auto compute_alone_to = [&](double target) {  // backward with no allreduce beside it
            if (done < target) {
                now += target - done;
                done = target;
            }
            if (done >= backward_work && backward_end < 0) backward_end = now;
        };
        double latency = 0, total = 0;
        const double comm_begin = now;
        for (size_t k = 0; k < layout.size(); ++k) {
            const sync::Bucket& b = layout.bucket(k);
            // When the bucket is ready, as backward's work done by then (all of it without overlap). A gradient
            // reported after backward's median end (a profile's medians, or the trainer's own measurements under
            // accumulation) makes the bucket wait that much past backward's end.
            double ready = backward_work;
            if (s.overlap && !local_sgd) {
                ready = 0;
                for (const sync::BucketSlot& slot : b.slots) {
                    const double r = t.ready_s[slot.param];
                    ready = std::max(ready, r >= 0 ? slow * r : backward_work);
                }
            }
            CollectiveTime c = allreduce_time(s.algorithm, ranks, b.count * s.wire_bytes_per_float, link, b.count * 4.0);
            if (!bucket_seconds.empty()) {  // measured: the link only says how much of it is latency
                c.latency_s = std::min(c.latency_s, std::max(0.0, bucket_seconds[k]));
                c.bandwidth_s = std::max(0.0, bucket_seconds[k]) - c.latency_s;
            }
            // It starts when ready and the one before it has ended.
            compute_alone_to(std::min(ready, backward_work));
            if (ready > backward_work) now = std::max(now, backward_end + (ready - backward_work));
            double left = c.total();  // its seconds alone
            if (done < backward_work && left > 0) {  // beside backward: both slower until one of them ends
                const double comm_span = left * slow_comm, backward_span = (backward_work - done) * slow_compute;
                if (backward_span <= comm_span) {  // backward ends first; the rest of the allreduce runs alone
                    now += backward_span;
                    left -= backward_span / slow_comm;
                    done = backward_work;
                    backward_end = now;
                } else {
                    now += comm_span;
                    done = std::min(backward_work, done + comm_span / slow_compute);
                    left = 0;
                    if (done >= backward_work) backward_end = now;
                }
            }
            now += left;
            p.bucket_end_s.push_back(now);
            latency += c.latency_s;
            total += c.total();
        }
        const double comm_end = now;
        compute_alone_to(backward_work);  // what is left of backward after the last bucket
        // Without contention backward ends when it would alone, exactly (the walk's sums may differ in the last bit).
        if (slow_compute == 1 && slow_comm == 1) backward_end = backward_end_alone;
        p.terms.contention = std::max(0.0, backward_end - backward_end_alone);
        double exposed = 0;
        if (local_sgd) {  // a blocking parameter average, paid once per period
            exposed = (comm_end - comm_begin) / s.local_sgd_period;
            step = slow * one_rank_step + exposed;
        } else {
            exposed = std::max(0.0, comm_end - backward_end);
            step = std::max(comm_end, backward_end) + slow * t.optimizer_s;
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
            {"communication", terms.communication}, {"latency", terms.latency},
            {"contention", terms.contention}};
}

}  // namespace ringtrain::scaling

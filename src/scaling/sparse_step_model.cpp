// The sparse step model (see the header).
#include "ringtrain/scaling/sparse_step_model.hpp"

#include <algorithm>
#include <cmath>

#include "ringtrain/core/error.hpp"

namespace ringtrain::scaling {

namespace {

// t = alpha_coeff·α + beta_coeff·β for one call of `c` at `ranks` ranks (ring algorithms).
struct Coefficients {
    double alpha = 0, beta = 0;
};
Coefficients coefficients(const Collective& c, int ranks) {
    if (ranks < 2 || c.bytes <= 0) return {};
    const double n = ranks;
    if (c.kind == CollectiveKind::Allreduce) return {2 * (n - 1), 2 * (n - 1) / n * c.bytes};
    return {n - 1, (n - 1) * c.bytes};  // each rank's bytes pass N−1 links
}

void require_non_negative(double v, const char* what) {
    if (!(v >= 0)) throw Error(std::string("predict_sparse_step: ") + what + " must be >= 0 (got " + std::to_string(v) + ")");
}

}  // namespace

CollectiveTime collective_time(const Collective& c, int ranks, const Link& link) {
    const Coefficients k = coefficients(c, ranks);
    return {k.alpha * link.alpha_s, k.beta * link.beta_s_per_byte};
}

Link fit_collectives_link(std::span<const TimedCollectives> samples, int ranks, std::string source) {
    if (ranks < 2) throw Error("fit_collectives_link: a link is fitted from collectives of two or more ranks");
    // Weighted least squares with weights 1/t²: relative errors, so a large message's noise does not decide α.
    double saa = 0, sab = 0, sbb = 0, sat = 0, sbt = 0;
    for (const TimedCollectives& s : samples) {
        if (!(s.seconds > 0)) continue;
        Coefficients k;
        for (const Collective& c : s.collectives) {
            const Coefficients one = coefficients(c, ranks);
            k.alpha += c.per_step * one.alpha;
            k.beta += c.per_step * one.beta;
        }
        const double w = 1.0 / (s.seconds * s.seconds);
        saa += w * k.alpha * k.alpha;
        sab += w * k.alpha * k.beta;
        sbb += w * k.beta * k.beta;
        sat += w * k.alpha * s.seconds;
        sbt += w * k.beta * s.seconds;
    }
    const double det = saa * sbb - sab * sab;
    if (!(std::abs(det) > 1e-12 * std::max(saa * sbb, 1e-300)))
        throw Error("fit_collectives_link: the timed collectives cannot tell latency from bandwidth (two sizes "
                    "needed)");
    Link link;
    link.source = std::move(source);
    link.alpha_s = (sat * sbb - sbt * sab) / det;
    link.beta_s_per_byte = (saa * sbt - sab * sat) / det;
    if (link.alpha_s < 0) {  // the best line with no latency
        link.alpha_s = 0;
        link.beta_s_per_byte = sbb > 0 ? std::max(0.0, sbt / sbb) : 0.0;
    } else if (link.beta_s_per_byte < 0) {
        link.beta_s_per_byte = 0;
        link.alpha_s = saa > 0 ? std::max(0.0, sat / saa) : 0.0;
    }
    return link;
}

SparsePrediction predict_sparse_step(const SparseStepInputs& in, const Link& link, int ranks, int64_t batch_per_rank) {
    if (ranks < 1) throw InputError("predict: ranks must be at least 1 (got " + std::to_string(ranks) + ")");
    require_non_negative(in.input_s, "input_s");
    require_non_negative(in.forward_s, "forward_s");
    require_non_negative(in.backward_s, "backward_s");
    require_non_negative(in.optimizer_s, "optimizer_s");
    require_non_negative(in.merge_rows, "merge_rows");
    require_non_negative(in.merge_s_per_row, "merge_s_per_row");
    for (const Collective& c : in.exchange) {
        require_non_negative(c.bytes, "an exchange collective's bytes");
        if (!(c.per_step >= 0 && c.per_step <= 1))
            throw Error("predict_sparse_step: " + c.name + " runs on a share of steps outside [0, 1] (" +
                        std::to_string(c.per_step) + ")");
    }
    SparsePrediction p;
    p.ranks = ranks;
    p.batch_per_rank = batch_per_rank;
    p.terms.input = in.input_s;
    p.terms.compute = in.forward_s + in.backward_s;
    p.terms.optimizer = in.optimizer_s;
    const double one_rank_step = in.compute_s();
    double step = one_rank_step;
    if (ranks > 1) {
        const double slow = 1.0 + std::max(0.0, in.straggler);
        p.terms.straggler = (slow - 1.0) * one_rank_step;
        if (in.opening_bytes > 0)
            p.opening = collective_time({"opening allreduce", CollectiveKind::Allreduce, in.opening_bytes, 1}, ranks, link);
        double latency = 0, total = 0;
        for (const Collective& c : in.exchange) {
            CollectiveTime t = collective_time(c, ranks, link);
            t.latency_s *= c.per_step;
            t.bandwidth_s *= c.per_step;
            p.exchange.push_back(t);
            latency += t.latency_s;
            total += t.total();
        }
        if (in.measured_exchange_s >= 0) {
            // Measured: each entry keeps its formula's share of it, its latency at most the formula's α part.
            const double scale = total > 0 ? in.measured_exchange_s / total : 0.0;
            latency = 0;
            for (CollectiveTime& t : p.exchange) {
                const double mine = total > 0 ? t.total() * scale : in.measured_exchange_s / double(p.exchange.size());
                t.latency_s = std::min(t.latency_s, mine);
                t.bandwidth_s = mine - t.latency_s;
                latency += t.latency_s;
            }
            total = in.measured_exchange_s;
        }
        p.terms.latency = p.opening.latency_s + latency;
        p.terms.communication = p.opening.bandwidth_s + (total - latency);
        p.terms.merge = in.merge_rows * in.merge_s_per_row;
        step = slow * one_rank_step + p.terms.latency + p.terms.communication + p.terms.merge;
    }
    p.step_s = step;
    p.samples_per_s = step > 0 ? static_cast<double>(batch_per_rank) * ranks / step : 0.0;
    p.efficiency = step > 0 ? one_rank_step / step : 0.0;
    p.dominant = dominant_term(p.terms);
    return p;
}

std::string dominant_term(const SparseTerms& t) {
    const std::pair<const char*, double> terms[] = {
        {"compute", t.compute},     {"input", t.input},
        {"optimizer", t.optimizer}, {"straggler", t.straggler},
        {"communication", t.communication}, {"latency", t.latency}, {"merge", t.merge}};
    const auto* best = std::max_element(std::begin(terms), std::end(terms),
                                        [](const auto& a, const auto& b) { return a.second < b.second; });
    return best->first;
}

nlohmann::json terms_json(const SparseTerms& t) {
    return {{"input", t.input},         {"compute", t.compute},
            {"optimizer", t.optimizer}, {"straggler", t.straggler},
            {"communication", t.communication}, {"latency", t.latency}, {"merge", t.merge}};
}

}  // namespace ringtrain::scaling

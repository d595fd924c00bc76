// The run's own prediction: see the header.
#include "ringtrain/train/run_prediction.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "ringtrain/core/error.hpp"
#include "ringtrain/sync/bucket_layout.hpp"

namespace ringtrain::train {

using nlohmann::json;

namespace {

scaling::StepTimings timings_of(const RunMeasurements& m) {
    scaling::StepTimings t;
    const double p = static_cast<double>(std::max<int64_t>(m.passes, 1));
    // With accumulation only the last pass's backward reports gradients; the earlier ones count as work before it.
    t.input_s = m.data_s;
    t.forward_s = m.forward_s + m.backward_s * (p - 1) / p;
    t.backward_s = m.backward_s / p;
    t.optimizer_s = m.optimizer_s;
    t.grad_floats = m.grad_floats;
    t.ready_s = m.ready_s;
    return t;
}

// "fc1" from "fc1.weight"; the bucket's layers in order, at most three named.
std::string bucket_layers(const RunMeasurements& m, const sync::BucketLayout& layout, size_t b) {
    std::vector<std::string> layers;
    for (size_t param : layout.params(b)) {
        std::string name = param < m.grad_names.size() ? m.grad_names[param] : std::string("parameter ");
        if (param >= m.grad_names.size()) name += std::to_string(param);
        if (const auto dot = name.rfind('.'); dot != std::string::npos && dot > 0) name.resize(dot);
        if (std::find(layers.begin(), layers.end(), name) == layers.end()) layers.push_back(name);
    }
    std::string out;
    for (size_t i = 0; i < layers.size() && i < 3; ++i) {
        if (i > 0) out += '+';
        out += layers[i];
    }
    if (layers.size() > 3) {
        out += '+';
        out += std::to_string(layers.size() - 3);
        out += " more";
    }
    return out;
}

// The bucket whose allreduce stuck out past the end of backward the most.
size_t most_exposed_bucket(const scaling::StepTimings& t, const std::vector<double>& bucket_s,
                           const scaling::Prediction& p) {
    const double slow = 1.0 + std::max(0.0, p.setting.straggler);
    const double backward_end = slow * (t.input_s + t.forward_s + t.backward_s);
    size_t best = 0;
    double best_exposed = -1;
    for (size_t b = 0; b < bucket_s.size() && b < p.bucket_end_s.size(); ++b) {
        const double end = p.bucket_end_s[b], start = end - bucket_s[b];
        const double exposed = std::max(0.0, end - std::max(start, backward_end));
        if (exposed > best_exposed) {
            best_exposed = exposed;
            best = b;
        }
    }
    return best;
}

// Milliseconds with three significant digits and never an exponent: "0.0589", "27.6", "1030".
std::string ms(double seconds) {
    const double v = 1e3 * seconds;
    char text[32];
    std::snprintf(text, sizeof text, v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : v >= 1 ? "%.2f" : "%.3g", v);
    return text;
}

}  // namespace

std::vector<double> bucket_transfer_s(const RunMeasurements& m) {
    const double total = std::accumulate(m.bucket_s.begin(), m.bucket_s.end(), 0.0);
    if (!(total > 0)) throw Error("run prediction: no gradient allreduce was timed");
    // The wait for the slowest rank's work is inside the collectives (a faster rank waits in its allreduce); over
    // the ranks it averages slowest − mean local work per step. What is left is the transfer.
    const double wait = std::max(0.0, m.slowest_work_s - m.mean_work_s);
    const double keep = std::clamp((total - wait) / total, 0.05, 1.0);
    std::vector<double> out;
    for (double t : m.bucket_s) out.push_back(keep * std::max(0.0, t));
    return out;
}

scaling::Link link_from_run(const RunMeasurements& m) {
    if (m.ranks < 2) throw Error("run prediction: a link is fitted from the collectives of two or more ranks");
    const std::vector<double> transfer = bucket_transfer_s(m);
    // Bucket b's bytes on the wire: its gradients' floats (buckets take the parameters from the last one backwards).
    const sync::BucketLayout layout(m.grad_floats, m.tensors_per_bucket);
    std::vector<scaling::LinkSample> samples;
    for (size_t b = 0; b < transfer.size() && b < layout.size(); ++b)
        if (transfer[b] > 0) {
            const double floats = static_cast<double>(layout.bucket(b).count);
            samples.push_back({floats * m.wire_bytes_per_float, transfer[b], floats * sizeof(float)});
        }
    std::string source = "this run's gradient allreduces (" + std::to_string(samples.size()) +
                         " bucket(s), less the wait for the slowest rank)";
    if (m.latency_probe_s > 0) {
        samples.push_back({sizeof(float), m.latency_probe_s});
        source += " and a one-float latency probe";
    }
    std::vector<double> sizes;
    for (const auto& s : samples) sizes.push_back(s.bytes);
    std::sort(sizes.begin(), sizes.end());
    const bool fittable = std::unique(sizes.begin(), sizes.end()) - sizes.begin() >= 2;
    const scaling::Algorithm a = scaling::algorithm_of_backend(m.backend);
    source += std::string(a == scaling::Algorithm::Auto ? ", the ring backend's algorithms" : ", ring formula") +
              " at " + std::to_string(m.ranks) + " ranks over " + m.backend;
    if (fittable) return scaling::fit_link(samples, m.ranks, a, source);
    // One size only (one bucket, no probe): no latency can be told apart; all of it counts as bandwidth.
    scaling::Link link, unit_beta;
    unit_beta.beta_s_per_byte = 1;
    const double per_beta = scaling::allreduce_time(a, m.ranks, std::max(samples[0].bytes, 1.0), unit_beta,
                                                    samples[0].float32_bytes).bandwidth_s;
    link.beta_s_per_byte = samples[0].seconds / per_beta;
    link.source = source + " (one size: alpha not separable, taken as 0)";
    return link;
}

RunPrediction predict_run(const RunMeasurements& m) {
    if (m.ranks < 2) throw Error("run prediction: needs two or more ranks");
    if (m.grad_floats.size() != m.ready_s.size() || m.grad_floats.empty())
        throw Error("run prediction: " + std::to_string(m.grad_floats.size()) + " gradients with " +
                    std::to_string(m.ready_s.size()) + " ready times");
    if (m.bucket_s.size() != m.tensors_per_bucket.size())
        throw Error("run prediction: " + std::to_string(m.bucket_s.size()) + " bucket times for " +
                    std::to_string(m.tensors_per_bucket.size()) + " buckets");
    if (!(m.measured_step_s > 0)) throw Error("run prediction: no step was measured");
    RunPrediction r;
    r.link = link_from_run(m);
    const sync::BucketLayout layout(m.grad_floats, m.tensors_per_bucket);
    const scaling::StepTimings t = timings_of(m);
    scaling::Setting s;
    s.algorithm = scaling::algorithm_of_backend(m.backend);  // as the link was fitted at this N
    s.wire_bytes_per_float = m.wire_bytes_per_float;
    s.overlap = m.overlap;
    r.straggler = m.rank0_work_s > 0 ? std::max(0.0, m.slowest_work_s / m.rank0_work_s - 1.0) : 0.0;
    s.straggler = r.straggler;
    const int64_t samples = m.batch_per_rank * std::max<int64_t>(m.passes, 1);
    // The buckets' own transfer times through the timeline; the fitted line alone, for comparison (how much the
    // α-β line loses on this run's own sizes: what an extrapolation in N would start from).
    const std::vector<double> transfer = bucket_transfer_s(m);
    r.prediction = scaling::predict_step(t, layout, r.link, s, m.ranks, samples, transfer);
    // "ring fp32 overlap": the backend, then the wire and overlap as describe() words them after the algorithm.
    const std::string described = s.describe();
    r.setting = m.backend + described.substr(described.find(' '));
    if (s.algorithm != scaling::Algorithm::Auto) r.setting += " (modelled by the ring formula)";
    r.fitted_link_step_s = scaling::predict_step(t, layout, r.link, s, m.ranks, samples).step_s;
    r.measured_step_s = m.measured_step_s;
    r.one_rank_step_s = t.compute_s();
    r.measured_efficiency = r.one_rank_step_s / m.measured_step_s;
    r.error = (r.prediction.step_s - m.measured_step_s) / m.measured_step_s;
    const scaling::Terms& k = r.prediction.terms;
    const std::string& d = r.prediction.dominant;
    char text[256];
    if (d == "communication" || d == "latency") {
        const size_t b = most_exposed_bucket(t, transfer, r.prediction);
        std::snprintf(text, sizeof text, "allreduce of bucket %zu (%s, %.2g MB) over %s%s", b,
                      bucket_layers(m, layout, b).c_str(), 4e-6 * static_cast<double>(layout.bucket(b).count),
                      m.backend.c_str(), d == "latency" ? " (latency-bound)" : "");
    } else if (d == "compute") {
        std::snprintf(text, sizeof text, "compute (forward+backward, %s ms)", ms(k.compute).c_str());
    } else if (d == "straggler") {
        std::snprintf(text, sizeof text, "waiting for the slowest rank (%s ms)", ms(k.straggler).c_str());
    } else {
        std::snprintf(text, sizeof text, "%s (%s ms)", d.c_str(), ms(d == "input" ? k.input : k.optimizer).c_str());
    }
    r.dominant = text;
    return r;
}

namespace {
// The fields a dense and a sparse run's prediction share (RunPrediction, SparseRunPrediction).
template <class R>
json shared_prediction_fields(const R& r) {
    const auto& p = r.prediction;
    return {{"step_s", p.step_s},
            {"samples_per_s", p.samples_per_s},
            {"efficiency", p.efficiency},
            {"dominant", r.dominant},
            {"dominant_term", p.dominant},
            {"link", {{"alpha_s", r.link.alpha_s}, {"beta_s_per_byte", r.link.beta_s_per_byte}, {"source", r.link.source}}},
            {"error", r.error},
            {"measured_step_s", r.measured_step_s},
            {"step_s_fitted_link", r.fitted_link_step_s},
            {"error_fitted_link", (r.fitted_link_step_s - r.measured_step_s) / r.measured_step_s},
            {"measured_efficiency", r.measured_efficiency},
            {"straggler", r.straggler},
            {"terms_s", scaling::terms_json(p.terms)}};
}
}  // namespace

json run_prediction_json(const RunPrediction& r) {
    json j = shared_prediction_fields(r);
    j["setting"] = r.setting;
    return j;
}

// ---- the sparse path ----

namespace {

// α = 0 and the whole exchange as bandwidth: one size only, nothing tells latency apart.
scaling::Link bandwidth_only_link(const std::vector<scaling::Collective>& exchange, int ranks, double seconds) {
    const scaling::Link unit{0.0, 1.0, ""};  // collective_time's bandwidth part is then its β coefficient
    double coefficient = 0;
    for (const scaling::Collective& c : exchange) coefficient += c.per_step * scaling::collective_time(c, ranks, unit).bandwidth_s;
    scaling::Link link;
    link.beta_s_per_byte = coefficient > 0 ? seconds / coefficient : 0.0;
    return link;
}

std::string kilobytes(double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, bytes >= 1e6 ? "%.2g MB" : "%.3g KB", bytes >= 1e6 ? 1e-6 * bytes : 1e-3 * bytes);
    return text;
}

}  // namespace

SparseRunPrediction predict_sparse_run(const SparseRunMeasurements& m) {
    if (m.ranks < 2) throw Error("run prediction: needs two or more ranks");
    if (!(m.measured_step_s > 0)) throw Error("run prediction: no step was measured");
    if (!(m.sync_s > 0) || m.exchange.empty()) throw Error("run prediction: no gradient exchange was timed");
    SparseRunPrediction r;
    // The sync's time is the exchange, the merge, and (on a faster rank) the wait for the slowest rank's forward
    // and backward; what is left after the other two is the exchange (at least 5 % of it: noise must not zero it).
    const double wait = std::max(0.0, m.slowest_before_sync_s - m.mean_before_sync_s);
    // The merge probe is the difference of two timed collectives; on a loaded host one of them can be descheduled
    // in every repeat. The merge is inside the sync's own time, so that bounds it (95 %: the exchange keeps 5 %).
    const double sync_left = std::max(0.0, m.sync_s - wait);
    r.merge_s_per_row = m.merge_rows > 0 ? std::min(m.merge_s_per_row, 0.95 * sync_left / m.merge_rows) : 0.0;
    const double merge = m.merge_rows * r.merge_s_per_row;
    r.exchange_s = std::max(0.05 * m.sync_s, m.sync_s - wait - merge);
    std::string source = m.timed;
    std::vector<scaling::TimedCollectives> samples = {{m.exchange, r.exchange_s}};
    if (m.latency_probe_s > 0) {
        samples.push_back({{{"latency probe", scaling::CollectiveKind::Allreduce, sizeof(float), 1}}, m.latency_probe_s});
        source += " and a one-float latency probe";
    }
    source += ", ring formulas at " + std::to_string(m.ranks) + " ranks over " + m.backend;
    try {
        r.link = scaling::fit_collectives_link(samples, m.ranks, source);
    } catch (const Error&) {  // one size only: no latency can be told apart
        r.link = bandwidth_only_link(m.exchange, m.ranks, r.exchange_s);
        r.link.source = source + " (one size: alpha not separable, taken as 0)";
    }
    scaling::SparseStepInputs in;
    in.input_s = m.data_s;
    in.forward_s = m.forward_s;
    in.backward_s = m.backward_s;
    in.optimizer_s = m.optimizer_s;
    in.exchange = m.exchange;
    if (m.opening_in_exchange) in.opening_bytes = 0;
    in.merge_rows = m.merge_rows;
    in.merge_s_per_row = r.merge_s_per_row;
    r.straggler = m.rank0_work_s > 0 ? std::max(0.0, m.slowest_work_s / m.rank0_work_s - 1.0) : 0.0;
    in.straggler = r.straggler;
    r.fitted_link_step_s = scaling::predict_sparse_step(in, r.link, m.ranks, m.batch_per_rank).step_s;
    in.measured_exchange_s = r.exchange_s;
    r.prediction = scaling::predict_sparse_step(in, r.link, m.ranks, m.batch_per_rank);
    r.measured_step_s = m.measured_step_s;
    r.one_rank_step_s = in.compute_s();
    r.measured_efficiency = r.one_rank_step_s / m.measured_step_s;
    r.error = (r.prediction.step_s - m.measured_step_s) / m.measured_step_s;

    const scaling::SparseTerms& k = r.prediction.terms;
    const std::string& d = r.prediction.dominant;
    char text[256];
    if (d == "communication" || d == "latency") {
        size_t top = 0;
        for (size_t i = 1; i < r.prediction.exchange.size(); ++i)
            if (r.prediction.exchange[i].total() > r.prediction.exchange[top].total()) top = i;
        const scaling::Collective& c = m.exchange[top];
        if (r.prediction.opening.total() > r.prediction.exchange[top].total())
            std::snprintf(text, sizeof text, "the opening allreduce (4 doubles) over %s (latency-bound)", m.backend.c_str());
        else
            std::snprintf(text, sizeof text, "%s (%s%s, %.0f %% of steps) over %s%s", c.name.c_str(),
                          kilobytes(c.bytes).c_str(), c.kind == scaling::CollectiveKind::Allgather ? " per rank" : "",
                          100 * c.per_step, m.backend.c_str(), d == "latency" ? " (latency-bound)" : "");
    } else if (d == "merge") {
        std::snprintf(text, sizeof text, "merging the ranks' rows (%.0f rows per step, %s ms)", m.merge_rows,
                      ms(k.merge).c_str());
    } else if (d == "compute") {
        std::snprintf(text, sizeof text, "compute (forward+backward, %s ms)", ms(k.compute).c_str());
    } else if (d == "straggler") {
        std::snprintf(text, sizeof text, "waiting for the slowest rank (%s ms)", ms(k.straggler).c_str());
    } else {
        std::snprintf(text, sizeof text, "%s (%s ms)", d == "input" ? "input (parse wait)" : d.c_str(),
                      ms(d == "input" ? k.input : k.optimizer).c_str());
    }
    r.dominant = text;
    return r;
}

json sparse_run_prediction_json(const SparseRunPrediction& r, const SparseRunMeasurements& m) {
    const scaling::SparsePrediction& p = r.prediction;
    json exchange = json::array();
    for (size_t i = 0; i < m.exchange.size(); ++i) {
        const scaling::Collective& c = m.exchange[i];
        exchange.push_back({{"name", c.name},
                            {"kind", c.kind == scaling::CollectiveKind::Allgather ? "allgather" : "allreduce"},
                            {"bytes", c.bytes},
                            {"per_step", c.per_step},
                            {"predicted_s", i < p.exchange.size() ? p.exchange[i].total() : 0.0}});
    }
    json j = shared_prediction_fields(r);
    // Under mpi or nccl the exchange is still modelled by the ring's formulas, fitted to that backend's own timings.
    const std::string formulas = m.backend == "ring" ? "ring formulas" : m.backend + " (modelled by the ring formulas)";
    j.update({{"setting", "sparse " + formulas + ", no overlap"},
              {"exchange", exchange},
              {"exchange_s", r.exchange_s},
              {"merge_rows_per_step", m.merge_rows},
              {"merge_s_per_row", r.merge_s_per_row},
              {"merge_s_per_row_probe", m.merge_s_per_row}});
    return j;
}

std::string describe_run_prediction(const json& summary) {
    const auto it = summary.find("predicted");
    if (it == summary.end() || !it->is_object() || !it->contains("step_s")) return "";
    const json& p = *it;
    char line[512];
    // "compute", not "scaling": the run cannot know its one-rank speed (the same ranks alone may run faster), so this
    // is its compute's share of the step, not the weak-scaling efficiency against one rank (bench/scaling.sh).
    std::snprintf(line, sizeof line, "compute: %.2f of the step (not weak scaling: that needs a one-rank run); "
                  "predicted step %.4g ms vs measured %.4g ms (%+.0f %%); dominant: %s",
                  p.value("measured_efficiency", 0.0), 1e3 * p.value("step_s", 0.0), 1e3 * p.value("measured_step_s", 0.0),
                  100 * p.value("error", 0.0), p.value("dominant", std::string("?")).c_str());
    return line;
}

}  // namespace ringtrain::train

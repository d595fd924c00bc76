// Predictor: see the header.
#include "ringtrain/predict/predictor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/json_file.hpp"

namespace ringtrain::predict {

scaling::StepTimings timings_from(const train::StepProfile& profile, int64_t passes) {
    scaling::StepTimings t;
    const double p = static_cast<double>(std::max<int64_t>(passes, 1));
    // Gradient accumulation: only the last pass's backward reports gradients, so the earlier passes' backward
    // counts as work before it (kept under forward, where it sits in time).
    t.input_s = p * profile.input_s;
    t.forward_s = p * profile.forward_s + (p - 1) * profile.backward_s;
    t.backward_s = profile.backward_s;
    t.optimizer_s = profile.optimizer_s;
    for (const auto& g : profile.gradients) {
        t.grad_floats.push_back(g.floats);
        t.ready_s.push_back(g.ready_s);
    }
    return t;
}

sync::BucketLayout layout_for(const train::SyncPlan& sync, const scaling::StepTimings& t) {
    const size_t fusion = static_cast<size_t>(sync.fusion_bytes);
    // Local SGD averages parameters in groups of sync.fusion_bytes (sync::ParameterAverager, in forward order: the
    // same sizes as these whenever the model fits one group, as the shipped ones do in the default 64 MiB), after the
    // optimizer, with no ready times to bucket by.
    if (sync.mode == train::SyncMode::LocalSgd) return sync::BucketLayout::by_size(t.grad_floats, fusion);
    if (sync.cycle_time_ms > 0 && sync.overlap && fusion > 0) {
        std::vector<double> ready = t.ready_s;
        for (double& r : ready)
            if (r < 0) r = t.backward_s;  // not reported: packed by synchronize after backward
        return sync::BucketLayout::by_time(t.grad_floats, fusion, static_cast<size_t>(sync.min_bucket_bytes),
                                           sync.cycle_time_ms, ready);
    }
    return sync::BucketLayout::by_size(t.grad_floats, fusion);
}

scaling::Algorithm algorithm_for(const train::SyncPlan& sync) {
    return scaling::algorithm_of_backend(train::to_string(sync.backend));
}

scaling::Setting setting_for(const train::SyncPlan& sync, scaling::Algorithm algorithm, double straggler) {
    scaling::Setting s;
    s.algorithm = algorithm;
    s.wire_bytes_per_float = sync.compression == train::Compression::None ? 4.0 : 2.0;
    s.overlap = sync.overlap;
    s.straggler = straggler;
    s.local_sgd_period = sync.mode == train::SyncMode::LocalSgd ? static_cast<int>(sync.local_sgd_period) : 0;
    return s;
}

std::vector<double> bucket_seconds(const sync::BucketLayout& layout, const scaling::Setting& s, int n,
                                   const scaling::MeasuredAllreduce& measured) {
    std::vector<double> out;
    for (size_t k = 0; k < layout.size(); ++k) {
        const double floats = static_cast<double>(layout.bucket(k).count);
        out.push_back(measured.seconds(n, floats * s.wire_bytes_per_float, floats * 4.0));
    }
    return out;
}

std::vector<Row> predict_rows(const scaling::StepTimings& t, const sync::BucketLayout& layout, const scaling::Link& link,
                              const scaling::Setting& configured, const std::vector<int>& ranks, int64_t batch_per_rank,
                              const scaling::MeasuredAllreduce* measured) {
    const auto predict = [&](const scaling::Setting& s, int n) {
        if (!measured) return scaling::predict_step(t, layout, link, s, n, batch_per_rank);
        const std::vector<double> seconds = bucket_seconds(layout, s, n, *measured);
        return scaling::predict_step(t, layout, link, s, n, batch_per_rank, seconds);
    };
    std::vector<Row> rows;
    for (int n : ranks) {
        Row r;
        r.configured = predict(configured, n);
        r.best = r.configured;
        // What a config can choose: the wire format (sync.compression). The algorithm is the backend's own choice
        // per message size (Algorithm::Auto for sync.backend ring), which no key selects. Local SGD's averages
        // travel in float32 (train refuses sync.compression with it): no 16-bit candidate.
        if (configured.local_sgd_period == 0) {
            scaling::Setting s = configured;
            s.wire_bytes_per_float = configured.wire_bytes_per_float < 4 ? 4.0 : 2.0;
            const scaling::Prediction p = predict(s, n);
            if (p.step_s < r.best.step_s) r.best = p;
        }
        rows.push_back(r);
    }
    return rows;
}

std::vector<int> parse_ranks(const std::string& text) {
    std::vector<int> out;
    if (text.empty()) {
        for (int n = 2; n <= 512; n *= 2) out.push_back(n);
        return out;
    }
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        size_t used = 0;
        int v = 0;
        try {
            v = std::stoi(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != item.size() || item.empty() || v < 1 || v > 1000000)
            throw InputError("--ranks: '" + item + "' is not a rank count; give a list like 2,4,8 (1 to 1000000)");
        out.push_back(v);
    }
    if (out.empty()) throw InputError("--ranks: empty list; give a list like 2,4,8");
    return out;
}

scaling::Algorithm parse_algorithm(const std::string& text) {
    for (scaling::Algorithm a : scaling::kAlgorithms)
        if (text == to_string(a)) return a;
    throw InputError("--algorithm: unknown '" + text + "'; use auto, ring, recursive_doubling or halving_doubling");
}

std::string format_table(const std::vector<Row>& rows, const scaling::Link& link) {
    std::ostringstream os;
    char line[320];
    std::snprintf(line, sizeof line, "link: alpha %.2f us, %.3f Gbit/s (%s)\n", link.alpha_s * 1e6,
                  link.bytes_per_s() * 8e-9, link.source.c_str());
    os << line;
    std::snprintf(line, sizeof line, "%6s %10s %12s %6s %8s  %-13s %-32s %6s\n", "ranks", "step_ms", "samples/s", "eff",
                  "slowest", "dominant", "best setting", "eff");
    os << line;
    for (const Row& r : rows) {
        const scaling::Prediction& c = r.configured;
        // slowest: how much longer the slowest rank's local work is than the profiled rank's (the straggler share).
        std::snprintf(line, sizeof line, "%6d %10.3f %12.1f %5.1f%% %+7.1f%%  %-13s %-32s %5.1f%%\n", c.ranks,
                      c.step_s * 1e3, c.samples_per_s, 100 * c.efficiency, 100 * c.setting.straggler,
                      c.dominant.c_str(), r.best.setting.describe().c_str(), 100 * r.best.efficiency);
        os << line;
    }
    return os.str();
}

namespace {

nlohmann::json prediction_json(const scaling::Prediction& p) {
    return {{"ranks", p.ranks},
            {"step_s", p.step_s},
            {"samples_per_s", p.samples_per_s},
            {"efficiency", p.efficiency},
            {"dominant", p.dominant},
            {"setting", p.setting.describe()},
            {"algorithm", to_string(p.setting.algorithm)},
            {"straggler", p.setting.straggler},
            {"terms_s", scaling::terms_json(p.terms)}};
}

}  // namespace

nlohmann::json rows_json(const std::vector<Row>& rows) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows) {
        nlohmann::json j = prediction_json(r.configured);
        j["best"] = prediction_json(r.best);
        out.push_back(j);
    }
    return out;
}

nlohmann::json profile_json(const train::StepProfile& profile, const sync::BucketLayout& layout) {
    nlohmann::json grads = nlohmann::json::array(), layers = nlohmann::json::array(), buckets = nlohmann::json::array();
    for (const auto& g : profile.gradients)
        grads.push_back({{"name", g.name}, {"floats", g.floats}, {"ready_s", g.ready_s}});
    for (const auto& l : profile.layers)
        layers.push_back({{"layer", l.name}, {"forward_s", l.forward_s}, {"backward_s", l.backward_s}});
    for (const auto& b : layout.buckets()) buckets.push_back({{"floats", b.count}, {"tensors", b.slots.size()}});
    return {{"batch_size_per_rank", profile.batch_size},
            {"steps", profile.steps},
            {"device", profile.device},
            {"input_s", profile.input_s},
            {"forward_s", profile.forward_s},
            {"backward_s", profile.backward_s},
            {"optimizer_s", profile.optimizer_s},
            {"work_quantiles_s", profile.work_quantiles},
            {"gradients", grads},
            {"layers", layers},
            {"buckets", buckets}};
}

train::StepProfile profile_from_json(const nlohmann::json& doc, const std::string& source) {
    const std::string where = source + ": .profile";
    try {
        const nlohmann::json& p = doc.at("profile");
        train::StepProfile out;
        // Every time and size must be a finite number >= 0: get<size_t>() would wrap a negative count, and a negative
        // time would make a nonsense prediction instead of an error.
        auto seconds = [](const nlohmann::json& v, const char* key) {
            const double x = v.at(key).get<double>();
            if (!std::isfinite(x) || x < 0) throw InputError(std::string(key) + " must be a finite number >= 0");
            return x;
        };
        auto count = [](const nlohmann::json& v, const char* key) {
            if (!v.at(key).is_number_unsigned()) throw InputError(std::string(key) + " must be a whole number >= 0");
            return v.at(key).get<size_t>();
        };
        out.batch_size = p.at("batch_size_per_rank").get<int64_t>();
        out.steps = p.at("steps").get<int>();
        out.device = p.at("device").get<std::string>();
        out.input_s = seconds(p, "input_s");
        out.forward_s = seconds(p, "forward_s");
        out.backward_s = seconds(p, "backward_s");
        out.optimizer_s = seconds(p, "optimizer_s");
        if (p.contains("work_quantiles_s"))  // written since 2026-11-28
            for (const auto& q : p.at("work_quantiles_s")) out.work_quantiles.push_back(q.get<double>());
        for (const auto& g : p.at("gradients"))
            out.gradients.push_back({g.at("name").get<std::string>(), count(g, "floats"), seconds(g, "ready_s")});
        for (const auto& l : p.at("layers"))
            out.layers.push_back({l.at("layer").get<std::string>(), seconds(l, "forward_s"), seconds(l, "backward_s")});
        if (out.batch_size < 1 || out.gradients.empty()) throw InputError("empty");
        return out;
    } catch (const std::exception& e) {
        throw InputError(where + ": not a profile written by `ringtrain predict --json` (" +
                         without_exception_id(e.what()) +
                         "); write one with --json first");
    }
}



nlohmann::json spread_from_json(const nlohmann::json& spread, const std::string& source) {
    if (spread.is_null()) return spread;  // a profile of one rank
    try {
        const auto per_rank = spread.at("work_quantiles_s_per_rank").get<std::vector<std::vector<double>>>();
        if (per_rank.empty() || !spread.at("source").is_string() ||
            spread.at("ranks").get<int64_t>() != static_cast<int64_t>(per_rank.size()))
            throw InputError("no ranks, or .ranks is not the number of lists");
        for (const auto& q : per_rank) {
            if (q.size() < 2 || !std::is_sorted(q.begin(), q.end()))
                throw InputError("a rank's list has fewer than 2 times or is not sorted");
            for (double x : q)
                if (!std::isfinite(x) || x <= 0 || x > 1e6) throw InputError("a time that is not in (0, 1e6] s");
        }
        return spread;
    } catch (const std::exception& e) {
        throw InputError(source + ": .spread: not the measured ranks of `ringtrain predict --measure --json` (" +
                         without_exception_id(e.what()) + "); write it again, or remove .spread for a profile of one "
                         "rank");
    }
}

scaling::Contention contention_from_json(const nlohmann::json& contention, const std::string& source) {
    try {
        scaling::Contention c;
        for (auto [key, factor] : {std::pair{"compute", &c.compute}, std::pair{"communication", &c.communication}}) {
            *factor = contention.at(key).get<double>();
            // Measured factors can be large (an allreduce over shared memory waits for cores both ranks compute
            // on: 217x on the 2-vCPU VM), but not unbounded.
            if (!std::isfinite(*factor) || *factor < 1 || *factor > 1e6)
                throw InputError(std::string(".") + key + " is not a factor from 1 to 1e6");
        }
        return c;
    } catch (const std::exception& e) {
        throw InputError(source + ": .contention: not the measured contention of `ringtrain predict --measure --json` (" +
                         without_exception_id(e.what()) + "); write it again, or remove .contention (none assumed)");
    }
}

}  // namespace ringtrain::predict

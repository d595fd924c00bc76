// Rank 0's time split and the straggler share, as one line. See the header.
#include "ringtrain/train/time_split.hpp"

#include <algorithm>
#include <cstdio>

namespace ringtrain::train {

std::string describe_time_split(const nlohmann::json& summary) {
    if (summary.value("world_size", 1) < 2 || !summary.contains("phase_s")) return "";
    const auto& ph = summary["phase_s"];
    const double data = ph.value("data", 0.0), fwd = ph.value("forward", 0.0), bwd = ph.value("backward", 0.0);
    const double wait = ph.value("sync_wait", 0.0), opt = ph.value("optimizer", 0.0);
    const double total = data + fwd + bwd + wait + opt;
    if (total <= 0) return "";
    char line[320];
    int n = std::snprintf(line, sizeof line,
                          "time split (rank 0): forward+backward %.1f %%, input %.1f %%, optimizer %.1f %%, "
                          "waiting for gradients %.1f %%",
                          100 * (fwd + bwd) / total, 100 * data / total, 100 * opt / total, 100 * wait / total);
    std::string out(line, static_cast<size_t>(n));
    const auto st = summary.find("stragglers");
    if (st != summary.end() && st->value("steps", int64_t{0}) > 0 && st->contains("slowest_steps_per_rank")) {
        const double steps = static_cast<double>((*st)["steps"].get<int64_t>());
        const auto& last = (*st)["slowest_steps_per_rank"];
        // The rank named is the one that caused the most wait, where the summary says (a rank stopped for long
        // spells was last in 10 of 20 steps and caused ~90 % of the wait, and naming the rank last most often named
        // the other one on the tie); else the one last most often.
        const auto caused = st->find("wait_caused_s_per_rank");
        const bool by_wait = caused != st->end() && caused->is_array() && caused->size() == last.size() &&
                             std::all_of(caused->begin(), caused->end(), [](const nlohmann::json& v) { return v.is_number(); });
        size_t worst = 0;
        for (size_t r = 1; r < last.size(); ++r)
            if (by_wait ? (*caused)[r].get<double>() > (*caused)[worst].get<double>()
                        : last[r].get<int64_t>() > last[worst].get<int64_t>())
                worst = r;
        const double frac = st->value("wait_for_slowest_fraction", 0.0);
        n = std::snprintf(line, sizeof line,
                          "; the ranks' uneven local work cost %.1f %% of the run (rank %zu was the slowest in %.0f %% of "
                          "the steps",
                          100 * frac, worst, 100 * static_cast<double>(last[worst].get<int64_t>()) / steps);
        out.append(line, static_cast<size_t>(n));
        double caused_total = 0;
        if (by_wait)
            for (const auto& v : *caused) caused_total += v.get<double>();
        if (by_wait && caused_total > 0) {
            n = std::snprintf(line, sizeof line, " and caused %.0f %% of that wait",
                              100 * (*caused)[worst].get<double>() / caused_total);
            out.append(line, static_cast<size_t>(n));
        }
        out += ")";
        // A rank that is last in most steps is slower, not unlucky; so are ranks whose mean work over the whole run
        // differs by 15 % or more (on the H200 host's vCPUs two of four ranks took 1.6x as long, taking turns at being
        // last: bench/RESULTS.md, 2026-11-27). Balancing by speed wins that wait back (a CPU run in allreduce mode is
        // where sync.balance applies; its "balance" block is there only then).
        const bool one_slow_rank = static_cast<double>(last[worst].get<int64_t>()) / steps >= 0.75;
        bool slower_ranks = false;
        if (const auto w = st->find("mean_work_ms_per_rank");
            w != st->end() && w->is_array() && w->size() > 1 &&
            std::all_of(w->begin(), w->end(), [](const nlohmann::json& v) { return v.is_number(); })) {
            const auto by_value = [](const nlohmann::json& a, const nlohmann::json& b) {
                return a.get<double>() < b.get<double>();
            };
            const auto [lo, hi] = std::minmax_element(w->begin(), w->end(), by_value);
            slower_ranks = lo->get<double>() > 0 && hi->get<double>() >= 1.15 * lo->get<double>();
        }
        using Ptr = nlohmann::json::json_pointer;
        if (summary.value(Ptr("/sync/balance/mode"), std::string()) == "off" &&
            summary.value(Ptr("/sync/mode"), std::string()) == "allreduce" &&
            summary.value("device", std::string("cpu")) == "cpu" && frac >= 0.1 && (one_slow_rank || slower_ranks))
            out += "; --set sync.balance=speed gives a slower rank fewer of each step's samples";
    }
    return out;
}

}  // namespace ringtrain::train

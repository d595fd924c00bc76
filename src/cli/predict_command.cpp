// `ringtrain predict --config FILE --ranks LIST [--link RATE[,LATENCY] | --measure] [--json FILE] ...`:
// profile one rank's step in-process, take the link as given (10 Gbit/s, 5 µs when neither flag is) or fit it
// between the ranks of this job, and print
// the predicted scaling (predict/predictor.hpp).
#include "predict_command.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/json_file.hpp"
#include "ringtrain/predict/link_measurement.hpp"
#include "ringtrain/predict/predictor.hpp"
#include "ringtrain/train/config.hpp"
#include "ringtrain/train/step_profile.hpp"
#include "tool_args.hpp"

namespace ringtrain::cli {

namespace {

// The link when neither --link nor --measure is given: the common cluster Ethernet (README's predicted table also
// shows 25 and 100 Gbit/s). Said in the output, so a table is never read without its assumption.
constexpr const char* kDefaultLink = "10gbit,5us";

struct PredictArgs {
    std::string config, ranks, link, json, profile, algorithm = "ring";
    std::vector<std::string> overrides;
    bool measure = false;
    double straggler = 0;
    int steps = 10;
};

double parse_number(const std::string& flag, const std::string& text, double lo, double hi) {
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != text.size() || text.empty() || !(v >= lo && v <= hi))
        throw InputError(flag + ": '" + text + "' is not a number from " + nlohmann::json(lo).dump() + " to " +
                         nlohmann::json(hi).dump());
    return v;
}

PredictArgs parse_predict(int argc, char** argv) {
    PredictArgs a;
    std::vector<std::string> v(argv + 2, argv + argc);
    std::set<std::string> seen;
    for (size_t i = 0; i < v.size(); ++i) {
        std::string flag = v[i];
        std::optional<std::string> value;
        if (const auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = flag.substr(eq + 1);
            flag.resize(eq);
        }
        if (flag == "--measure") {
            if (value) throw InputError("--measure takes no value");
            a.measure = true;
            continue;
        }
        static const char* with_value[] = {"--config", "--set", "--ranks", "--link", "--json", "--straggler",
                                           "--algorithm", "--steps", "--profile"};
        if (std::find(std::begin(with_value), std::end(with_value), flag) == std::end(with_value))
            throw InputError("predict: unknown argument '" + v[i] + "'; try `ringtrain --help`");
        if (!value) {
            if (i + 1 >= v.size()) throw InputError(flag + " needs a value; try `ringtrain --help`");
            value = v[++i];
        }
        // Only --set may repeat: a second --ranks or --link silently replacing the first predicts what was not asked.
        if (flag != "--set" && !seen.insert(flag).second)
            throw InputError(flag + " given twice; pass it once (--ranks takes a list: 2,4,8)");
        if (flag == "--config") a.config = *value;
        else if (flag == "--set") a.overrides.push_back(*value);
        else if (flag == "--ranks") a.ranks = *value;
        else if (flag == "--link") a.link = *value;
        else if (flag == "--json") a.json = *value;
        else if (flag == "--algorithm") a.algorithm = *value;
        else if (flag == "--profile") a.profile = *value;
        else if (flag == "--straggler") a.straggler = parse_number(flag, *value, 0, 10);
        else a.steps = static_cast<int>(parse_number(flag, *value, 1, 10000));
    }
    if (a.config.empty()) throw InputError("predict needs --config FILE");
    if (a.measure && !a.link.empty())
        throw InputError("predict: --link and --measure are alternatives (a link given, or one timed between two "
                         "ranks); pass one of them, or neither for the default " + std::string(kDefaultLink));
    return a;
}

int predict(const PredictArgs& a, int world_rank, int world_size) {
    const auto ranks = predict::parse_ranks(a.ranks);
    const auto algorithm = predict::parse_algorithm(a.algorithm);
    scaling::Link link;
    const train::Config config = train::Config::load(a.config, a.overrides);
    const train::RunPlan& plan = config.plan();
    if (plan.data.is_sparse())
        throw InputError(a.config + ": data.format " + train::to_string(plan.data.format) +
                         ": predict profiles the dense path only; a sparse run predicts itself: run it on 2 ranks and "
                         "read summary.json \"predicted\" (docs/scaling.md, \"The sparse path\")");
    if (a.measure) {
        if (world_size < 2)
            throw InputError("predict --measure times allreduces between ranks: run it as mpirun -np 2 ringtrain "
                             "predict --measure ...");
        auto comm = comm::make_communicator(train::to_string(plan.sync.backend));
        std::vector<double> sizes;
        for (double b = 4096; b <= 16.0 * 1048576; b *= 4) sizes.push_back(b);
        const predict::LinkMeasurement m = predict::measure_link(*comm, sizes, 9);
        link = m.link;
        if (world_rank == 0)
            for (const auto& s : m.samples)
                std::printf("allreduce %10.0f bytes: %9.3f ms\n", s.bytes, s.seconds * 1e3);
    } else {
        if (world_size > 1)
            throw InputError("predict --link runs on one process; --measure is the one that needs mpirun -np 2");
        link = scaling::parse_link(a.link.empty() ? kDefaultLink : a.link);
        if (a.link.empty()) link.source = std::string("default ") + kDefaultLink + "; pass --link RATE[,LATENCY] or --measure";
    }
    if (world_rank != 0) return 0;  // the profile and the table are rank 0's alone
    // Checked before the profile: an unwritable --json found after it loses the profile (and under --measure the
    // measured link). Appending tests it without emptying a file that is there; one made by the test goes again.
    if (!a.json.empty()) {
        std::error_code ec;
        const bool existed = std::filesystem::exists(a.json, ec);
        if (!std::ofstream(a.json, std::ios::app))
            throw InputError("--json: cannot write '" + a.json + "'; check the folder exists and is writable");
        if (!existed) std::filesystem::remove(a.json, ec);
    }
    const train::StepProfile profile =
        a.profile.empty() ? train::profile_steps(config, 2, a.steps, 1.0)
                          : predict::profile_from_json(
                              read_json_file(a.profile, "--profile", "pass a file written by predict --json"), a.profile);
    const scaling::StepTimings timings = predict::timings_from(profile, plan.sync.backward_passes_per_step);
    const sync::BucketLayout layout = predict::layout_for(plan.sync, timings);
    const scaling::Setting setting = predict::setting_for(plan.sync, algorithm, a.straggler);
    const auto rows = predict::predict_rows(timings, layout, link, setting, ranks,
                                            profile.batch_size * plan.sync.backward_passes_per_step);
    std::printf("one rank (%s, batch %lld): input %.3f ms, forward %.3f ms, backward %.3f ms, optimizer %.3f ms; "
                "%zu gradients in %zu bucket(s)\n",
                profile.device.c_str(), static_cast<long long>(profile.batch_size), profile.input_s * 1e3,
                profile.forward_s * 1e3, profile.backward_s * 1e3, profile.optimizer_s * 1e3, timings.grad_floats.size(),
                layout.size());
    std::printf("predicted (weak scaling, %s, straggler %.0f%%):\n%s", setting.describe().c_str(), 100 * a.straggler,
                predict::format_table(rows, link).c_str());
    if (!a.json.empty()) {
        const nlohmann::json doc = {
            {"config", a.config},
            {"overrides", a.overrides},
            {"link",
             {{"alpha_s", link.alpha_s}, {"beta_s_per_byte", link.beta_s_per_byte},
              {"gbit_per_s", link.bytes_per_s() * 8e-9}, {"source", link.source}}},
            {"straggler", a.straggler},
            {"scaling", "weak"},
            {"profile", predict::profile_json(profile, layout)},
            {"rows", predict::rows_json(rows)}};
        std::ofstream out(a.json);
        out << doc.dump(2) << "\n";
        if (!out.good()) throw InputError("--json: cannot write '" + a.json + "'; check the folder exists and is writable");
    }
    return 0;
}

}  // namespace

int run_predict(int argc, char** argv, int world_rank, int world_size) {
    return run_tool([&] { return predict(parse_predict(argc, argv), world_rank, world_size); }, world_rank);
}

}  // namespace ringtrain::cli

// `ringtrain predict --config FILE --ranks LIST [--link RATE[,LATENCY] | --measure] [--json FILE] ...`:
// profile one rank's step in-process, take the link as given (10 Gbit/s, 5 µs when neither flag is) or fit it
// between the ranks of this job, and print
// the predicted scaling (predict/predictor.hpp).
#include "predict_command.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/core/crc32c.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/json_file.hpp"
#include "ringtrain/predict/contention_measurement.hpp"
#include "ringtrain/predict/link_measurement.hpp"
#include "ringtrain/predict/predictor.hpp"
#include "ringtrain/predict/straggler_estimate.hpp"
#include "ringtrain/sync/consistency.hpp"
#include "ringtrain/train/config.hpp"
#include "ringtrain/train/step_profile.hpp"
#include "tool_args.hpp"

namespace ringtrain::cli {

namespace {

// The link when neither --link nor --measure is given: the common cluster Ethernet (README's predicted table also
// shows 25 and 100 Gbit/s). Said in the output, so a table is never read without its assumption.
constexpr const char* kDefaultLink = "10gbit,5us";

const char* kPredictUsage = R"(Usage: ringtrain predict --config FILE [--set key=value]... [--ranks 2,4,..]
         [--link RATE[,LATENCY] | --measure] [--json FILE] [--straggler S] [--algorithm A] [--steps K]
         [--profile PREDICT.json]

Profiles one rank's training step (or reads --profile) and predicts step time, samples/s and efficiency at each
N in --ranks (default 2,4,...,512) for weak scaling, with the run's own buckets and overlap.
  --link 10gbit,5us   the link between ranks (the default); rates in gbit/mbit/kbit, latency in us/ms/s
  --measure           fit the link from allreduces between the ranks of this job (mpirun -np M, M >= 2); every
                      rank profiles at once and the slowest of N is drawn from their step times
  --straggler S       the slowest rank S slower than the profiled one (0.05 = 5 %), at every N
  --algorithm A       auto (the ring backend's choice per message size; the default with sync.backend ring),
                      ring (the default for mpi and nccl), recursive_doubling or halving_doubling
  --json FILE         the profile and the rows as one JSON document
See docs/scaling.md.
)";

struct PredictArgs {
    std::string config, ranks, link, json, profile, algorithm;  // algorithm "": the backend's (algorithm_for)
    std::vector<std::string> overrides;
    bool measure = false, help = false;
    double straggler = 0;
    bool straggler_given = false;  // --straggler: one share for every N, instead of a measured spread
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

// --json FILE: writable, and if it is there, a previous predict output (what it replaces); any other file (a config,
// a summary.json) named by mistake would be lost. Appending tests writability without emptying the file.
void check_json_path(const std::string& path) {
    std::error_code ec;
    const bool existed = std::filesystem::exists(path, ec);
    // Only a regular file with something in it can be lost; a pipe, /dev/stdout or /dev/null is written as before
    // (reading one would block).
    if (existed && std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) > 0) {
        nlohmann::json old;
        try {
            old = read_json_file(path, "--json", "");
        } catch (const InputError&) {
        }
        if (!old.is_object() || !old.contains("rows") || !old.contains("profile"))
            throw InputError("--json: '" + path + "' exists and is not a predict output, which writing would replace; "
                             "name a new file, or remove it first");
    }
    if (!std::ofstream(path, std::ios::app))
        throw InputError("--json: cannot write '" + path + "'; check the folder exists and is writable");
    if (!existed) std::filesystem::remove(path, ec);
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
        if (flag == "--help" || flag == "-h") {
            a.help = true;
            return a;
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
        else if (flag == "--straggler") {
            a.straggler = parse_number(flag, *value, 0, 10);
            a.straggler_given = true;
        }
        else a.steps = static_cast<int>(parse_number(flag, *value, 1, 10000));
    }
    if (a.config.empty()) throw InputError("predict needs --config FILE");
    if (a.measure && !a.link.empty())
        throw InputError("predict: --link and --measure are alternatives (a link given, or one timed between two "
                         "ranks); pass one of them, or neither for the default " + std::string(kDefaultLink));
    return a;
}

int predict_with(const PredictArgs& a, const train::Config& config, int world_rank, int world_size);

int predict(const PredictArgs& a, int world_rank, int world_size) {
    if (a.help) {
        if (world_rank <= 0) std::fputs(kPredictUsage, stdout);
        return 0;
    }
    const train::Config config = train::Config::load(a.config, a.overrides);
    try {
        return predict_with(a, config, world_rank, world_size);
    } catch (const InputError& e) {
        // A check outside the config names its key alone: say where the value came from, as train does.
        const std::string said = config.with_origin(e.what());
        if (said == e.what()) throw;
        throw InputError(said);
    }
}

// The link, and under --measure the allreduce times it was fitted to (each bucket then takes the time measured at
// its size: scaling::MeasuredAllreduce).
struct LinkUsed {
    scaling::Link link;
    std::optional<scaling::MeasuredAllreduce> measured;
};

// --measure: the communicator over the config's backend, the ranks' agreement on the config (each profiles its own
// side by side: another config on one rank would make the spread and the link another run's; exit 2 on every rank,
// as train), and the link measured over it. Otherwise the given (or default) link, on one process.
LinkUsed link_for(const PredictArgs& a, const train::RunPlan& plan, scaling::Algorithm algorithm, int world_rank,
                  int world_size, std::unique_ptr<comm::Communicator>& comm) {
    if (!a.measure) {
        if (world_size > 1)
            throw InputError("predict --link runs on one process; --measure is the one that needs mpirun -np 2");
        scaling::Link link = scaling::parse_link(a.link.empty() ? kDefaultLink : a.link);
        if (a.link.empty()) link.source = std::string("default ") + kDefaultLink + "; pass --link RATE[,LATENCY] or --measure";
        return {link, std::nullopt};
    }
    if (world_size < 2)
        throw InputError("predict --measure times allreduces between ranks: run it as mpirun -np 2 ringtrain "
                         "predict --measure ...");
    comm = comm::make_communicator(train::to_string(plan.sync.backend));
    sync::Facts facts;
    sync::append_json_facts(plan.to_json(), "", facts);
    std::erase_if(facts, [](const sync::Fact& f) { return f.key.rfind("output.", 0) == 0; });  // rank 0's alone
    facts.push_back({"predict --steps", std::to_string(a.steps)});
    sync::require_same_facts(*comm, facts);
    predict::LinkMeasurement m = predict::measure_link(*comm, predict::link_sizes(), 9, algorithm);
    if (world_rank == 0)
        for (const auto& s : m.samples)  // beside the fitted line's time: where the transport is not one α and β
            std::printf("allreduce %10.0f bytes: %9.3f ms (the fitted line: %9.3f ms)\n", s.bytes, s.seconds * 1e3,
                        scaling::allreduce_time(algorithm, comm->size(), s.bytes, m.link, s.bytes).total() * 1e3);
    // The times are the backend's own algorithm's: with another --algorithm only the line fitted through its
    // formula says what that algorithm would take.
    if (algorithm != predict::algorithm_for(plan.sync)) {
        m.link.source += std::string("; --algorithm ") + scaling::to_string(algorithm) + ": every bucket by its formula";
        return {m.link, std::nullopt};
    }
    m.link.source += "; each bucket at the time measured at its size, carried to other N by the model";
    return {m.link, scaling::MeasuredAllreduce(m.samples, comm->size(), algorithm, m.link)};
}

// The step profile (rank 0's is the profile; a --profile file's on rank 0) and, where there is one, the spread of
// the ranks' step times ({"ranks", "work_quantiles_s_per_rank", "source"}).
struct Profiled {
    train::StepProfile profile;
    nlohmann::json spread;
    nlohmann::json measured_on;  // measured_on(config) of the run profiled (null: a --profile file from before it)
    scaling::Contention contention;  // backward and allreduce beside each other (1, 1 unless measured)
    nlohmann::json contention_json;  // how it was found: {"compute", "communication", "source", ...}
};

// What a profile's times belong to: the model (its file, and the CRC-32C of its bytes, so that a copy elsewhere is
// the same model) and the batch per rank. Another model or batch would predict another run's scaling.
nlohmann::json measured_on(const train::Config& config) {
    const std::string path = config.model_path();
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return {{"model_file", path},
            {"model_crc32c", crc32c(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())))},
            {"batch_size", config.plan().train.batch_size}};
}

// A --profile file must be of this config's model and batch: its times are that step's.
void check_profile_fits(const std::string& file, const Profiled& p, const train::Config& config) {
    const nlohmann::json now = measured_on(config);
    const int64_t batch = config.plan().train.batch_size;
    if (p.profile.batch_size != batch)
        throw InputError("--profile " + file + " was measured at train.batch_size " +
                         std::to_string(p.profile.batch_size) + ", the config has " + std::to_string(batch) +
                         "; profile again with this config (predict without --profile), or set train.batch_size=" +
                         std::to_string(p.profile.batch_size));
    if (p.measured_on.is_object() && p.measured_on.value("model_crc32c", nlohmann::json()) != now["model_crc32c"])
        throw InputError("--profile " + file + " was measured with the model " +
                         p.measured_on.value("model_file", std::string("?")) + ", the config's " +
                         now["model_file"].get<std::string>() + " differs; profile again with this config (predict "
                         "without --profile), or pass the config it was measured with");
}

// Under --measure, after the side-by-side profile: the step profiled again beside allreduces back to back
// (predict/contention_measurement.hpp), where a run overlaps them: host reductions beside a CPU backward. The
// allreduces run from a second thread while the profile builds a one-rank communicator of its own, which needs
// MPI_THREAD_MULTIPLE. Collective: every rank decides alike (the least able decides).
void measure_contention(const PredictArgs& a, const train::Config& config, comm::Communicator& comm, Profiled& p) {
    const train::SyncPlan& sync = config.plan().sync;
    std::string why_not;
    if (!sync.overlap)
        why_not = "sync.overlap is false, so no allreduce runs beside backward";
    else if (sync.mode == train::SyncMode::LocalSgd)
        why_not = "local SGD averages after the optimizer, beside no backward";
    else if (p.profile.device != "cpu")
        why_not = "the backward runs on a GPU";
    else if (!comm::mpi_thread_multiple())
        why_not = "this MPI does not grant MPI_THREAD_MULTIPLE";
    double able = why_not.empty() ? 1.0 : 0.0;
    comm.allreduce(std::span<double>(&able, 1), comm::ReduceOp::Min);
    if (able < 1 && why_not.empty()) why_not = "another rank cannot measure it";
    const auto not_measured = [&](const std::string& why) {
        p.contention = {};
        p.contention_json = {{"compute", 1.0}, {"communication", 1.0}, {"source", "not measured: " + why}};
    };
    if (!why_not.empty()) return not_measured(why_not);
    const double bytes = predict::contention_bytes(p.profile);
    predict::LoadedProfile loaded;
    // run_then_agree allows no collective inside; this one's collectives end on every rank before it returns or
    // throws (the allreduce loop stops on all ranks after the same allreduce, and a failing profile ends it too).
    sync::run_then_agree(comm, [&] {
        loaded = predict::profile_while_allreducing(comm, bytes, 5,
                                                    [&] { return train::profile_steps(config, 2, a.steps, 1.0); });
    });
    // Every rank computes the factors (rank 0's are used), with nothing collective after them.
    const std::optional<scaling::Contention> factors = predict::contention_from(p.profile, loaded);
    if (!factors) return not_measured("no allreduce ended beside the profile, or a time of 0 (clock resolution)");
    p.contention = *factors;
    p.contention_json = {
        {"compute", p.contention.compute},
        {"communication", p.contention.communication},
        {"backward_alone_s", p.profile.backward_s},
        {"backward_beside_s", loaded.profile.backward_s},
        {"allreduce_bytes", bytes},
        {"allreduce_alone_s", loaded.alone_s},
        {"allreduce_beside_s", loaded.during_s},
        {"allreduces", loaded.allreduces},
        {"source", "measured: the step profiled beside back-to-back allreduces of " +
                       std::to_string(static_cast<long long>(bytes)) + " bytes over " + comm.backend() + " at " +
                       std::to_string(comm.size()) + " ranks"}};
}

// Under --measure every rank profiles the step at the same moment: rank 0's is the profile (its compute shares the
// host as a run's would), and every rank's step times give the wait for the slowest of N. Collective with `comm`.
Profiled profile_for(const PredictArgs& a, const train::Config& config, comm::Communicator* comm, int world_rank,
                     int world_size) {
    const bool side_by_side = a.measure && a.profile.empty();
    Profiled p;
    const auto profile_here = [&] {
        // Checked before the profile: an unwritable --json found after it loses the profile (and under --measure the
        // measured link). A file that is there must be a previous predict output (it is replaced).
        if (world_rank == 0 && !a.json.empty()) check_json_path(a.json);
        if (a.profile.empty()) {
            if (world_rank == 0 || side_by_side) p.profile = train::profile_steps(config, 2, a.steps, 1.0);
            p.measured_on = measured_on(config);
        } else if (world_rank == 0) {
            const nlohmann::json doc = read_json_file(a.profile, "--profile", "pass a file written by predict --json");
            p.profile = predict::profile_from_json(doc, a.profile);
            if (doc.contains("spread")) p.spread = predict::spread_from_json(doc.at("spread"), a.profile);
            if (doc.contains("measured_on")) p.measured_on = doc.at("measured_on");
            if (doc.contains("contention")) {
                p.contention = predict::contention_from_json(doc.at("contention"), a.profile);
                p.contention_json = doc.at("contention");
            }
            check_profile_fits(a.profile, p, config);
        }
    };
    if (comm) {
        comm->barrier();  // the ranks' profiles start together
        sync::run_then_agree(*comm, profile_here);  // one rank's bad --json or data ends every rank, none waits
    } else {
        profile_here();
    }
    if (side_by_side) {
        const auto all = comm::allgather_strings(*comm, nlohmann::json(p.profile.work_quantiles).dump());
        p.spread = {{"ranks", world_size},
                    {"work_quantiles_s_per_rank", nlohmann::json::array()},
                    {"source", "measured: " + std::to_string(world_size) + " ranks profiling side by side"}};
        for (const std::string& q : all) p.spread["work_quantiles_s_per_rank"].push_back(nlohmann::json::parse(q));
        measure_contention(a, config, *comm, p);
    } else if (p.contention_json.is_null()) {
        p.contention_json = {{"compute", 1.0}, {"communication", 1.0},
                             {"source", a.profile.empty() ? "not measured: one process; --measure under mpirun -np 2 "
                                                            "measures it"
                                                          : "not measured: " + a.profile + " has none"}};
    }
    return p;
}

// One row per N. The straggler share per N: given (--straggler), from the measured spread, or 0 (one rank cannot
// see it).
std::vector<predict::Row> rows_for(const PredictArgs& a, const std::vector<int>& ranks, const train::RunPlan& plan,
                                   const Profiled& p, const scaling::StepTimings& timings,
                                   const sync::BucketLayout& layout, const LinkUsed& used,
                                   scaling::Algorithm algorithm) {
    const double base_s = p.profile.input_s + p.profile.forward_s + p.profile.backward_s + p.profile.optimizer_s;
    if (!a.straggler_given && !p.spread.is_null()) {
        // The spread's steps against the profiled one: a file put together from two machines would predict nonsense.
        double slowest = 0;
        for (const auto& q : p.spread.at("work_quantiles_s_per_rank")) slowest = std::max(slowest, q.back().get<double>());
        if (!(base_s > 0) || slowest > 1000 * base_s)
            throw InputError((a.profile.empty() ? std::string("predict") : a.profile + ": .spread") +
                             ": its slowest step (" + nlohmann::json(slowest).dump() + " s) is not comparable with the "
                             "profiled step (" + nlohmann::json(base_s).dump() + " s); measure both again with --measure");
    }
    const auto per_rank = p.spread.is_null()
                              ? std::vector<std::vector<double>>()
                              : p.spread.at("work_quantiles_s_per_rank").get<std::vector<std::vector<double>>>();
    std::vector<predict::Row> rows;
    for (int n : ranks) {
        double share = n > 1 ? a.straggler : 0.0;  // one rank waits for nobody (the model applies none at N = 1)
        if (!a.straggler_given && !per_rank.empty() && n > 1) share = predict::straggler_share(per_rank, base_s, n);
        scaling::Setting setting = predict::setting_for(plan.sync, algorithm, share);
        setting.contention = p.contention;
        for (auto& r : predict::predict_rows(timings, layout, used.link, setting, {n},
                                             p.profile.batch_size * plan.sync.backward_passes_per_step,
                                             used.measured ? &*used.measured : nullptr))
            rows.push_back(std::move(r));
    }
    return rows;
}

// The table on stdout and, with --json, the same as a document (rank 0).
void report(const PredictArgs& a, const train::RunPlan& plan, const Profiled& p, const scaling::StepTimings& timings,
            const sync::BucketLayout& layout, const LinkUsed& used, scaling::Algorithm algorithm,
            const std::vector<predict::Row>& rows) {
    const std::string straggler_source =
        a.straggler_given ? "given: the slowest rank " + nlohmann::json(a.straggler).dump() + " slower at every N"
        : !p.spread.is_null() ? p.spread.at("source").get<std::string>() + ", the slowest of N drawn from them"
                              : "0: one rank's profile cannot see the slowest of N; --measure under mpirun -np M "
                                "measures it, or pass --straggler S";
    const scaling::Setting setting = predict::setting_for(plan.sync, algorithm, a.straggler);  // named in the header
    std::printf("one rank (%s, batch %lld): input %.3f ms, forward %.3f ms, backward %.3f ms, optimizer %.3f ms; "
                "%zu gradients in %zu bucket(s)\n",
                p.profile.device.c_str(), static_cast<long long>(p.profile.batch_size), p.profile.input_s * 1e3,
                p.profile.forward_s * 1e3, p.profile.backward_s * 1e3, p.profile.optimizer_s * 1e3,
                timings.grad_floats.size(), layout.size());
    if (p.contention.any())
        std::printf("beside each other, backward took %.2fx its time alone and the allreduce %.2fx (%s)\n",
                    p.contention.compute, p.contention.communication,
                    p.contention_json.value("source", std::string("?")).c_str());
    std::printf("predicted (weak scaling, %s; slowest rank: %s):\n%s", setting.describe().c_str(),
                straggler_source.c_str(), predict::format_table(rows, used.link).c_str());
    if (a.json.empty()) return;
    const scaling::Link& link = used.link;
    nlohmann::json measured = nullptr;  // the allreduce times each bucket's time was taken from (--measure)
    if (used.measured) {
        measured = {{"ranks", used.measured->ranks()}, {"samples", nlohmann::json::array()}};
        for (const scaling::LinkSample& s : used.measured->samples())
            measured["samples"].push_back({{"bytes", s.bytes}, {"seconds", s.seconds}});
    }
    const nlohmann::json doc = {
        {"config", a.config},
        {"overrides", a.overrides},
        {"link",
         {{"alpha_s", link.alpha_s}, {"beta_s_per_byte", link.beta_s_per_byte},
          {"gbit_per_s", link.bytes_per_s() * 8e-9}, {"source", link.source}, {"measured", measured}}},
        // One share for every row (given, or 0), or null: each row's own, from the measured spread.
        {"straggler", a.straggler_given || p.spread.is_null() ? nlohmann::json(a.straggler) : nlohmann::json()},
        {"straggler_source", straggler_source},
        {"spread", p.spread},
        {"contention", p.contention_json},
        {"scaling", "weak"},
        {"profile", predict::profile_json(p.profile, layout)},
        {"measured_on", p.measured_on},
        {"rows", predict::rows_json(rows)}};
    std::ofstream out(a.json);
    out << doc.dump(2) << "\n";
    if (!out.good()) throw InputError("--json: cannot write '" + a.json + "'; check the folder exists and is writable");
}

int predict_with(const PredictArgs& a, const train::Config& config, int world_rank, int world_size) {
    const std::vector<int> ranks = predict::parse_ranks(a.ranks);  // a bad --ranks fails before any measuring
    const train::RunPlan& plan = config.plan();
    const scaling::Algorithm algorithm =
        a.algorithm.empty() ? predict::algorithm_for(plan.sync) : predict::parse_algorithm(a.algorithm);
    if (world_rank == 0)
        for (const std::string& n : config.notes()) std::fprintf(stderr, "ringtrain: note: %s\n", n.c_str());
    if (plan.data.is_sparse())
        throw InputError(a.config + ": data.format " + train::to_string(plan.data.format) +
                         ": predict profiles the dense path only; a sparse run predicts itself: run it on 2 ranks and "
                         "read summary.json \"predicted\" (docs/scaling.md, \"The sparse path\")");
    std::unique_ptr<comm::Communicator> comm;
    const LinkUsed link = link_for(a, plan, algorithm, world_rank, world_size, comm);
    const Profiled p = profile_for(a, config, comm.get(), world_rank, world_size);
    if (world_rank != 0) return 0;  // the table is rank 0's alone
    const scaling::StepTimings timings = predict::timings_from(p.profile, plan.sync.backward_passes_per_step);
    const sync::BucketLayout layout = predict::layout_for(plan.sync, timings);
    report(a, plan, p, timings, layout, link, algorithm, rows_for(a, ranks, plan, p, timings, layout, link, algorithm));
    return 0;
}

}  // namespace

int run_predict(int argc, char** argv, int world_rank, int world_size) {
    return run_tool([&] { return predict(parse_predict(argc, argv), world_rank, world_size); }, world_rank);
}

}  // namespace ringtrain::cli

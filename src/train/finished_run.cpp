// keep_finished_run_summary (see finished_run.hpp).
#include "finished_run.hpp"

#include <cstdint>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "ringtrain/telemetry/metrics_writer.hpp"

namespace ringtrain::train::detail {

bool nothing_left(const LoopState& at, const TrainPlan& train) {
    return at.epoch >= train.epochs || (train.max_steps > 0 && at.global_step >= train.max_steps);
}

std::optional<nlohmann::json> keep_finished_run_summary(comm::Communicator& comm, const RunPlan& plan,
                                                        const LoopState& at,
                                                        const std::function<nlohmann::json()>& evaluate) {
    const std::string path = plan.output.dir + "/summary.json";
    nlohmann::json kept;
    enum : uint64_t { kNone = 0, kComplete = 1, kWithoutTestFigures = 2 };
    uint64_t have = kNone;
    if (comm.rank() == 0) {
        std::ifstream in(path);
        if (in) {
            kept = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
            // A summary of a stopped run holds the last evaluation's figures, an earlier model's where the stop
            // came inside an epoch after an evaluation: the final model is evaluated then too.
            const bool stopped = kept.is_object() && kept.contains("stopped") && !kept["stopped"].is_null();
            if (kept.is_object())
                have = kept.contains("test_accuracy") && kept["test_accuracy"].is_number() && !stopped
                           ? kComplete
                           : kWithoutTestFigures;
        }
    }
    comm.broadcast_object(have, 0);
    if (have == kNone) return std::nullopt;
    nlohmann::json figures;
    if (have == kWithoutTestFigures) figures = evaluate();  // every rank: collective
    if (comm.rank() != 0) return nlohmann::json{{"stopped", nullptr}};
    if (have == kWithoutTestFigures) {
        for (const auto& [key, value] : figures.items()) kept[key] = value;
        kept["stopped"] = nullptr;
        telemetry::write_json_atomically(path, kept);
        const double accuracy = figures.value("test_accuracy", std::nan(""));
        std::fprintf(stderr,
                     "ringtrain: nothing left to train, but %s had no test figures of the final model (its job was "
                     "stopped at the run's last step): evaluated it now, test accuracy %.4f; summary.json updated\n",
                     path.c_str(), accuracy);
        return kept;
    }
    const TrainPlan& t = plan.train;
    const std::string where =
        t.max_steps > 0 && at.global_step >= t.max_steps
            ? "step " + std::to_string(at.global_step) + " of train.max_steps " + std::to_string(t.max_steps)
            : "epoch " + std::to_string(at.epoch) + " of " + std::to_string(t.epochs);
    std::fprintf(stderr,
                 "ringtrain: nothing left to train: the checkpoint is the end of the run (%s); %s is the finished "
                 "run's and stays as it is (train more with a larger train.epochs or train.max_steps)\n",
                 where.c_str(), path.c_str());
    kept["stopped"] = nullptr;
    return kept;
}

}  // namespace ringtrain::train::detail

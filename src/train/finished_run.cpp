// keep_finished_run_summary (see finished_run.hpp).
#include "finished_run.hpp"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace ringtrain::train::detail {

bool nothing_left(const LoopState& at, const TrainPlan& train) {
    return at.epoch >= train.epochs || (train.max_steps > 0 && at.global_step >= train.max_steps);
}

std::optional<nlohmann::json> keep_finished_run_summary(comm::Communicator& comm, const RunPlan& plan,
                                                        const LoopState& at) {
    const std::string path = plan.output.dir + "/summary.json";
    nlohmann::json kept;
    uint64_t have = 0;
    if (comm.rank() == 0) {
        std::ifstream in(path);
        if (in) {
            kept = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
            have = kept.is_object() ? 1 : 0;
        }
    }
    comm.broadcast_object(have, 0);
    if (have == 0) return std::nullopt;
    if (comm.rank() != 0) return nlohmann::json{{"stopped", nullptr}};
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

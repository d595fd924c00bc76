#include "ringtrain/telemetry/epoch_scalars.hpp"

#include <string>

namespace ringtrain::telemetry {

std::vector<Scalar> epoch_scalars(double train_loss, const nlohmann::json& evaluation, const PhaseTimes& phases,
                                  double train_seconds) {
    std::vector<Scalar> v = {{"epoch/train_loss", train_loss}};
    for (const auto& [key, value] : evaluation.items())
        if (key.rfind("test_", 0) == 0 && key != "test_samples" && value.is_number())
            v.push_back({"test/" + key.substr(5), value.get<double>()});
    for (int p = 0; p < static_cast<int>(Phase::Count); ++p)
        v.push_back({std::string("time/") + phase_name(static_cast<Phase>(p)) + "_s", phases.get(static_cast<Phase>(p))});
    v.push_back({"time/train_s", train_seconds});
    return v;
}

}  // namespace ringtrain::telemetry

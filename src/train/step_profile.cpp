// profile_steps: the training step of TrainingRun::forward_backward + the optimizer, timed piece by piece on a
// communicator of one rank (see the header). No gradient averaging: that is what the predictor models.
#include "ringtrain/train/step_profile.hpp"

#include <algorithm>
#include <chrono>
#include <mpi.h>

#include "ringtrain/comm/mpi_communicator.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/quantiles.hpp"
#include "trainer_parts.hpp"

namespace ringtrain::train {

namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr int kMaxSteps = 5000;

// Every measured step's times, kept until the medians are taken.
struct StepSamples {
    std::vector<double> input, forward, backward, optimizer;
    std::vector<std::vector<double>> ready;  // per parameter: seconds after backward began; -1 = not reported
    std::vector<std::vector<double>> layer_fwd, layer_bwd;

    void add_layers(const std::vector<nn::Model::LayerTiming>& lt) {
        layer_fwd.resize(lt.size());
        layer_bwd.resize(lt.size());
        for (size_t i = 0; i < lt.size(); ++i) {
            layer_fwd[i].push_back(lt[i].forward_s);
            layer_bwd[i].push_back(lt[i].backward_s);
        }
    }
};

// The medians, with the parameters' and layers' names.
StepProfile summarise(const StepSamples& m, const detail::TrainerParts& p) {
    StepProfile out;
    out.batch_size = p.plan.train.batch_size;
    out.steps = static_cast<int>(m.input.size());
    out.device = p.device_name;
    out.input_s = median(m.input);
    out.forward_s = median(m.forward);
    out.backward_s = median(m.backward);
    out.optimizer_s = median(m.optimizer);
    std::vector<double> work(m.input.size());
    for (size_t i = 0; i < work.size(); ++i) work[i] = m.input[i] + m.forward[i] + m.backward[i] + m.optimizer[i];
    // One quantile a step up to 1001: each gap then holds one step's mass (or a thousandth), so one slow step
    // weighs as one step, not as the whole top percent (the slowest of 1024 ranks draws from that tail).
    const int k = static_cast<int>(std::clamp<size_t>(work.size(), 2, 1001));
    out.work_quantiles = quantiles(std::move(work), k);
    const auto& params = p.model->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
        const bool reported = std::all_of(m.ready[i].begin(), m.ready[i].end(), [](double t) { return t >= 0; });
        out.gradients.push_back({params[i]->name, static_cast<size_t>(params[i]->value.numel()),
                                 reported ? median(m.ready[i]) : -1.0});
    }
    const auto& lt = p.model->layer_timings();
    for (size_t i = 0; i < lt.size(); ++i)
        out.layers.push_back({lt[i].name, median(m.layer_fwd[i]), median(m.layer_bwd[i])});
    return out;
}

}  // namespace

StepProfile profile_steps(const Config& config, int warmup, int steps, double min_seconds) {
    if (steps < 1 || warmup < 0) throw InputError("profile: needs at least one measured step");
    comm::MpiCommunicator self(MPI_COMM_SELF);
    detail::TrainerParts p(config, self, TrainerUse::Train);  // the steps it times may read any training file
    p.build_locally();
    const bool gpu = p.device == Device::CUDA;
    // On a GPU the host only queues work: wait for it at each boundary so the times are the device's.
    auto fence = [gpu] {
        if (gpu) cuda_synchronize();
    };
    p.model->set_profile(true);
    data::ShardedLoader loader(*p.data.train, p.train_loader);
    const int64_t per_epoch = loader.steps_per_epoch();
    if (per_epoch < 1) throw InputError("train.batch_size: larger than the training set; nothing to profile");
    loader.start_epoch(0);
    data::Batch batch;
    ops::LossTotals losses;
    Tensor dlogits;
    const auto& params = p.model->parameters();
    const float scale = 1.0f / static_cast<float>(p.plan.train.batch_size);
    const float lr = p.schedule->at(0.0);

    StepSamples m;
    m.ready.resize(params.size());
    std::vector<double> ready_now(params.size());
    int64_t in_epoch = 0, epoch = 0;
    double measured_s = 0;
    // At least `steps` measured steps and `min_seconds` of them: a 0.3 ms step needs thousands for a stable median.
    for (int s = 0; s < warmup + steps || (measured_s < min_seconds && s < warmup + kMaxSteps); ++s) {
        if (in_epoch == per_epoch) {
            loader.start_epoch(++epoch);
            in_epoch = 0;
        }
        fence();
        const double t0 = now_s();
        if (!loader.next(batch)) throw Error("profile: the data loader ended early");
        const auto [x, y] = p.on_device(batch);
        fence();
        const double t1 = now_s();
        const Tensor& logits = p.model->forward(*x, {true, &p.dropout_rng});
        p.model->loss().forward(logits, *y, losses);
        fence();
        const double t2 = now_s();
        std::fill(ready_now.begin(), ready_now.end(), -1.0);
        p.model->loss().backward(*y, scale, dlogits);
        p.model->backward(dlogits, [&](nn::Parameter& prm) {
            fence();
            const auto it = std::find(params.begin(), params.end(), &prm);
            if (it != params.end()) ready_now[static_cast<size_t>(it - params.begin())] = now_s() - t2;
        });
        fence();
        const double t3 = now_s();
        p.opt->step(lr);
        fence();
        const double t4 = now_s();
        ++in_epoch;
        if (s < warmup) continue;
        measured_s += t4 - t0;
        m.input.push_back(t1 - t0);
        m.forward.push_back(t2 - t1);
        m.backward.push_back(t3 - t2);
        m.optimizer.push_back(t4 - t3);
        for (size_t i = 0; i < params.size(); ++i) m.ready[i].push_back(ready_now[i]);
        m.add_layers(p.model->layer_timings());
    }
    (void)losses.take();
    return summarise(m, p);
}

}  // namespace ringtrain::train

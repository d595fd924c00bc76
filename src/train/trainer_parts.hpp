// What a Trainer is built from (private to train): data, model, optimizer, schedule, gradient synchronisation
// and telemetry, made once per process from the run plan, plus the evaluation that needs nothing else.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "datasets.hpp"
#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/data/sharded_loader.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/train/stop_request.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/optim/schedule.hpp"
#include "ringtrain/sync/batch_stats_reducer.hpp"
#include "ringtrain/sync/consistency.hpp"
#include "ringtrain/sync/gradient_sync.hpp"
#include "ringtrain/sync/stall_inspector.hpp"
#include "ringtrain/telemetry/gpu_monitor.hpp"
#include "ringtrain/telemetry/timeline.hpp"
#include "ringtrain/train/config.hpp"
#include "ringtrain/train/trainer.hpp"

namespace ringtrain::train::detail {

struct TrainerParts {
    TrainerParts(const Config& config, comm::Communicator& comm, TrainerUse use);

    // Data, model, optimizer, and the facts every rank must share: no collectives, so a rank that fails here cannot
    // leave the others waiting.
    void build_locally();
    // Every rank runs the same plan, model, data shape and buckets, or every rank throws CollectiveInputError naming
    // the first difference. Collective; before any collective whose shape depends on the run.
    void agree_across_ranks();
    // Rank 0's start values; gradient synchronisation. Collective.
    void build_collectively();

    bool is_root() const { return rank == 0; }
    // The batch on the compute device: CPU batches are used as they are; for a GPU they are copied over
    // asynchronously on a copy stream of its own (training batches from the loader's page-locked buffers, others
    // through a staging buffer), so the host does not wait for the GPU here; the training loader waits for a batch's
    // copy before it refills that buffer (before_refill).
    std::pair<const Tensor*, const Tensor*> on_device(const data::Batch& b);
    // Test-set accuracy and loss over all ranks' shares (exact global values), at global step `step` (for a stall
    // message). Collective.
    nlohmann::json evaluate(int64_t step);
    // The stall watchdog's watch over one collective of the main communicator (`bytes` of this rank's payload; step
    // < 0: not known); none on one rank. The gradient buckets have their reducer's own.
    sync::StallWatchdog::Watch watch(const char* what, size_t bytes, int64_t step);

    const Config config;  // a copy: the Trainer does not depend on its caller's
    const RunPlan& plan;  // config.plan()
    const TrainerUse use;
    AfterStop after_stop = AfterStop::RestoreHandlers;  // Trainer::set_process_exits_after_train
    comm::Communicator& comm;
    const int rank, world;
    Device device = Device::CPU;
    std::string device_name = "cpu";
    Datasets data;
    data::LoaderOptions train_loader, eval_loader;
    Rng init_rng;
    Rng dropout_rng;
    std::unique_ptr<nn::Model> model;
    std::unique_ptr<sync::CommBatchStatsReducer> batch_stats;  // sync.batchnorm, more than one rank
    std::unique_ptr<optim::Optimizer> opt;
    std::unique_ptr<optim::LrSchedule> schedule;
    std::unique_ptr<telemetry::Timeline> timeline;
    std::unique_ptr<sync::GradientSync> gsync;
    std::unique_ptr<sync::ParameterAverager> averager;
    std::unique_ptr<sync::ParameterAverager> buffer_averager;  // BatchNorm running stats (host-staged on a GPU)
    std::unique_ptr<AsyncUploader> uploader;             // GPU only
    bool batches_in_place = false;  // GPU: the training loader fills page-locked batches, copied in place
    std::unique_ptr<telemetry::GpuMonitor> gpu_monitor;  // this rank's GPU, while training (NVML, where present)
    std::string gpu_monitor_why;                         // why there is none
    sync::Facts facts;                                   // what agree_across_ranks compares (plan_agreement.hpp)
    // sync.stall_warning_s / stall_abort_s over the main communicator's collectives (several ranks): evaluation,
    // stop votes, epoch sums, local SGD and BatchNorm averages, speed balancing, synchronised BatchNorm. A rank
    // frozen there would otherwise hold every other rank silently.
    std::unique_ptr<sync::StallWatchdog> stall_watchdog;

private:
    void build_optimizer();
    void use_synchronised_batchnorm();
};

}  // namespace ringtrain::train::detail

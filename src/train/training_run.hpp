// One call of Trainer::train() (private to train): the loop position and everything the loop measures, with
// the step and the occasional work around it (resume, logging, checkpoints, evaluation, summary) as methods.
// Trainer::train() is the loop itself, calling these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "ringtrain/data/sharded_loader.hpp"
#include "ringtrain/ops/ops.hpp"
#include "ringtrain/sync/batch_balancer.hpp"
#include "ringtrain/telemetry/metrics_writer.hpp"
#include "ringtrain/telemetry/phases.hpp"
#include "ringtrain/telemetry/progress.hpp"
#include "ringtrain/telemetry/straggler.hpp"
#include "ringtrain/telemetry/tensorboard_writer.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/train/stop_request.hpp"
#include "output_folder.hpp"
#include "run_measurements.hpp"
#include "trainer_parts.hpp"

namespace ringtrain::train::detail {

class TrainingRun {
public:
    // Installs the stop signals' handlers (StopRequest) for the run's lifetime; its flag is this rank's vote in the
    // gradient allreduce.
    explicit TrainingRun(TrainerParts& parts);
    ~TrainingRun();
    TrainingRun(const TrainingRun&) = delete;
    TrainingRun& operator=(const TrainingRun&) = delete;

    // Rank 0 loads the checkpoint the plan names (resume=auto: the newest that verifies) and opens its outputs (a
    // failure ends the job on all ranks), then every rank takes rank 0's position, a fresh start included.
    void resume();
    // Where the loop is: epoch, first step still to run in it, steps run in all (what a checkpoint records).
    const LoopState& position() const { return pos_; }
    // Whether resume() took a checkpoint (on every rank).
    bool resumed() const { return !resumed_from_.empty(); }
    int64_t steps_per_epoch() const { return steps_per_epoch_; }
    // True (from then on) once train.max_steps steps have run.
    bool stop_at_max_steps();
    bool stopped_by_max_steps() const { return stopped_by_max_steps_; }
    // True (from then on) once the ranks agreed, at the end of a step, that a stop signal came (StopRequest).
    bool stopped_by_signal() const { return stop_signal_ != 0; }

    void begin_epoch();
    // One optimizer step: backward_passes_per_step forward/backward passes, the gradient allreduce (or, in
    // local SGD, the periodic parameter average), the update. Returns the learning rate used.
    float run_step();
    // Takes the training losses still on the device into the sums; throws when the loss is not finite.
    void read_loss();
    // metrics.jsonl step line and progress line: the mean loss since the previous regular line. `restart_window`
    // false (a stop's extra line) keeps counting from that line, as the checkpoint records it.
    void log_step(float lr, bool restart_window = true);
    // Mid-epoch checkpoint (checkpoint.every_steps). Collective.
    void write_step_checkpoint();
    // The epoch's loss over all ranks; unless max_steps stopped it: evaluation, epoch line, epoch checkpoint.
    void end_epoch();
    // The loop is over: a stop signal from now on (or one not agreed on in time) no longer stops the run.
    void end_of_votes() { stop_.votes_over(); }
    // After the loop: one model on every rank, the final checkpoint (always after a stop signal), an evaluation if
    // none ran (not after a stop signal: the grace time is short).
    void finish();
    // Gathers every rank's totals, rank 0 writes summary.json (run_summary.cpp). Collective.
    nlohmann::json write_summary();
    // The model's test figures now ({"test_loss", "test_accuracy", ...}, the same on every rank). Collective.
    nlohmann::json evaluate_final_model() {
        evaluate_now();
        return last_eval_;
    }

private:
    // Parts of write_summary (run_summary.cpp).
    void add_data_fields(nlohmann::json& summary) const;
    nlohmann::json learning_stalled_json() const;
    void add_prediction(nlohmann::json& summary);  // collective
    void load_resume_checkpoint();
    void log_epoch(int64_t finished);
    void load_checkpoint_for_this_run(const std::string& path);
    void open_outputs();
    void adopt_root_position();
    double forward_backward(int64_t pass);  // returns the samples it read
    struct LossSums {
        double loss = 0.0, samples = 0.0;
    };
    LossSums epoch_sums_over_ranks();
    LossSums recorded_epoch_loss(int rank) const;
    void write_checkpoint(const LoopState& at);
    nlohmann::json gather_summary();  // write_summary's collective part
    std::vector<nn::Parameter> averaged_model();
    std::vector<nn::Parameter> averaged_buffers();
    std::vector<Tensor*> rank_tensors();
    size_t rank_tensors_first() const;  // rank_tensors()' place among a checkpoint's tensors
    void average_parameters_now();
    void average_buffers_now();
    void evaluate_now();
    // The epoch's scalars for TensorBoard: train loss, the evaluation, the time split so far, bytes so far.
    std::vector<telemetry::Scalar> epoch_scalars() const;
    // At the end of a step: do the ranks agree that a stop signal came? Free on the host gradient paths (the vote
    // rode in the last bucket); a one-value allreduce at logged steps on the device path, and per averaging in local
    // SGD.
    void agree_on_stop();
    // sync.balance: this step's local work into the balancer and, when an exchange is due, the new split into the
    // loader from the next step it has not started reading. Collective when due (the same steps on every rank).
    void balance_batches(double work_s, double samples);

    TrainerParts& parts_;
    const RunPlan& plan_;
    const double t_start_;
    data::ShardedLoader loader_;
    // With gradient accumulation a step is `passes_` loader batches: k local backward passes, one allreduce.
    const int64_t passes_;
    const int64_t steps_per_epoch_;
    // Each pass's gradient is scaled so the accumulated one is the mean over the step's passes x batch samples.
    const float loss_scale_;
    const bool local_sgd_;
    // What each rank keeps as its own between averages, so that checkpoints hold every rank's copy of it next to the
    // ranks' average (checkpoint.hpp, RankCopies) and a resumed run continues exactly: with several ranks, local SGD's
    // parameters and optimizer state (and buffers), or a synchronous run's BatchNorm buffers (the running statistics
    // of its own batches, averaged only for evaluations).
    enum class OwnTensors { None, All, Buffers };
    const OwnTensors own_;
    // A GPU step whose host reads device data mid-step (synchronised BatchNorm's statistics, per-layer profiling):
    // the previous step's gradient collectives are waited for first, watched for stalls (GradientSync::drain).
    const bool drain_before_step_;
    // sync.balance speed with more than one rank, else null.
    std::unique_ptr<sync::BatchBalancer> balancer_;

    // pos_.epoch_loss_sum/epoch_samples hold all ranks' sums up to this run's start of the epoch (an older resumed
    // checkpoint's, else 0); this rank's own sums since then are in epoch_local_. A checkpoint records every rank's
    // epoch_local_ (extra.epoch_loss_per_rank) and a resumed run continues its own (resumed_local_, taken by the first
    // begin_epoch), so the epoch's mean adds the same numbers in the same order as an uninterrupted run.
    LoopState pos_;
    LossSums epoch_local_, resumed_local_;
    double epoch_t0_ = 0.0;
    struct Window {  // steps since the last logged one
        double t0 = 0.0;
        int64_t steps = 0;
        double loss_sum = 0.0, samples = 0.0;
    } window_, resumed_window_;  // resumed_window_: from the checkpoint, taken by the first begin_epoch
    int64_t steps_this_run_ = 0;
    bool stopped_by_max_steps_ = false;
    StopRequest stop_;
    int stop_signal_ = 0;  // the agreed stop's signal (the highest number any rank got), 0 = none
    int64_t last_checkpoint_step_ = -1;
    int64_t last_average_step_ = 0;  // local_sgd: the global step of the last parameter average
    // The global step at which the BatchNorm buffers were last averaged (-1: not since this run started). A second
    // average of equal buffers is not always the same bits (x+x+x)/3: so never twice at one step, and a resumed run
    // knows whether the run it continues had averaged them at the checkpoint's step.
    int64_t buffers_averaged_step_ = -1;
    std::string resumed_from_;
    RankCopies resumed_copies_;  // rank 0, between loading a checkpoint and sending every rank its own tensors

    data::Batch batch_;
    ops::LossTotals pending_loss_;  // this rank's training losses not yet read by the host
    Tensor dlogits_;

    telemetry::MetricsWriter metrics_;  // rank 0 only
    OutputFolderLock output_lock_;      // rank 0 only: held for the run
    telemetry::TensorBoardWriter tensorboard_;  // rank 0 only, with output.tensorboard
    telemetry::Progress progress_;
    telemetry::PhaseTimes phases_;
    // Local work per synchronised step (CPU only: on a GPU the host only queues work), for the straggler report.
    telemetry::StepWorkLog work_log_;
    // Local SGD (CPU): local work (data, forward, backward, update) per averaging period, for its prediction.
    telemetry::StepWorkLog period_work_log_;
    double period_work_s_ = 0;
    int64_t averages_ = 0;  // local SGD: parameter averagings so far (the loop's, and before evaluations and saves)
    // For the run's own prediction (summary.json "predicted", run_measurements.hpp).
    StepClock step_clock_;
    double latency_probe_s_ = -1;
    telemetry::PhaseTimes phases_after_first_step_;  // the prediction's inputs leave the first step out
    nlohmann::json last_eval_ = {{"test_loss", nullptr}, {"test_accuracy", nullptr}};
    int64_t last_eval_step_ = -1;  // the global step last_eval_ scored
    double train_loss_;
    bool log_finished_epoch_ = false;  // resumed at an epoch's end whose line the stopped run never wrote
    double train_seconds_ = 0.0, eval_seconds_ = 0.0;
    double checkpoint_seconds_ = 0.0;  // writing checkpoints (left out of train_seconds_)
};

}  // namespace ringtrain::train::detail

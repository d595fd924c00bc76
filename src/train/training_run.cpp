#include "training_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <span>
#include <sstream>

#include "add_seconds.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/sync/consistency.hpp"
#include "ringtrain/sync/setup_deadline.hpp"
#include "ringtrain/telemetry/epoch_scalars.hpp"

namespace ringtrain::train::detail {

using nlohmann::json;
namespace fs = std::filesystem;
using telemetry::Phase;

namespace {

// Times one phase of a step into the run's totals and, when a timeline is on, draws it as a span.
class PhaseScope {
public:
    PhaseScope(telemetry::PhaseTimes& t, Phase p, telemetry::Timeline* tl)
        : timer_(t, p), span_(tl, telemetry::phase_name(p), "phase") {}

private:
    telemetry::ScopedPhase timer_;
    telemetry::Span span_;
};

// Checkpoints with per-rank copies: the step at which the BatchNorm buffers were last averaged (absent: not at the
// checkpoint's step, so a resumed run averages them where it must). Named when only local SGD kept copies.
constexpr const char* kBuffersAveragedStep = "local_sgd_buffers_averaged_step";
// Every rank's own sums of the epoch so far, [[loss, samples], ...] (absent in checkpoints before 2026-11-28 12:30
// UTC, whose epoch_loss_sum holds all of them).
constexpr const char* kEpochLossPerRank = "epoch_loss_per_rank";

// Rank 0's position after resuming, sent to every rank as it is. The flags are full words (0 or 1) so the struct
// has no padding bytes.
struct ResumePoint {
    int64_t resumed, log_finished_epoch, rank_copies;
    int64_t epoch, step_in_epoch, global_step, optimizer_steps, last_average_step, buffers_averaged_step;
    double epoch_loss_sum, epoch_samples, finished_epoch_train_loss;
};

}  // namespace

TrainingRun::TrainingRun(TrainerParts& parts)
    : parts_(parts),
      plan_(parts.plan),
      t_start_(telemetry::now_seconds()),
      loader_(*parts.data.train, parts.train_loader),
      passes_(plan_.sync.backward_passes_per_step),
      steps_per_epoch_(loader_.steps_per_epoch() / passes_),
      loss_scale_(1.0f / static_cast<float>(plan_.train.batch_size * passes_)),
      local_sgd_(plan_.sync.mode == SyncMode::LocalSgd),
      own_(parts.world == 1                ? OwnTensors::None
           : local_sgd_                      ? OwnTensors::All
           : !parts.model->buffers().empty() ? OwnTensors::Buffers
                                             : OwnTensors::None),
      drain_before_step_(parts.device == Device::CUDA && (plan_.sync.batchnorm || plan_.train.profile_layers)),
      stop_(stop_signal_number(plan_.train.stop_signal), plan_.train.stop_grace_s, parts.rank, parts.after_stop),
      progress_(to_string(plan_.output.progress), parts.is_root(), plan_.train.log_every_steps),
      step_clock_(parts.model->parameters()),
      train_loss_(std::nan("")) {
    parts_.gsync->set_vote(&stop_.flag());
    if (plan_.sync.balance == Balance::Speed && parts_.world > 1 && !local_sgd_)
        balancer_ = std::make_unique<sync::BatchBalancer>(parts_.comm, plan_.train.batch_size);
    if (steps_per_epoch_ == 0)
        throw InputError("train.batch_size: " + std::to_string(plan_.train.batch_size) + " per rank x " +
                         std::to_string(parts_.world) + " ranks is more than the " +
                         std::to_string(parts_.data.train->size()) +
                         " training samples (with sync.backward_passes_per_step " + std::to_string(passes_) +
                         "); use a smaller batch or fewer ranks");
}

TrainingRun::~TrainingRun() { parts_.gsync->set_vote(nullptr); }

// ---- resume ----

void TrainingRun::resume() {
    // Only rank 0 reads a checkpoint; the others take its position, parameters and RNG states below, so every rank
    // follows rank 0's decision, a fresh start included.
    // A read that never returns (a hung file system) would hold the other ranks in the agreement for ever: set-up's
    // deadline (sync.setup_timeout_s) covers it.
    sync::SetupDeadline deadline(parts_.comm, plan_.sync.setup_timeout_s);
    deadline.enter(parts_.is_root() ? "reading the checkpoint to resume from" : "waiting for rank 0 to read the checkpoint");
    sync::run_then_agree(parts_.comm, [this] {
        if (!parts_.is_root()) return;
        output_lock_ = OutputFolderLock(plan_.output.dir);  // before reading checkpoints another run may write
        load_resume_checkpoint();
        open_outputs();
    });
    deadline.enter("receiving rank 0's position, parameters and RNG states");
    if (parts_.world > 1) adopt_root_position();
    deadline.disarm();
    if (!resumed_from_.empty())
        progress_.line("resumed from " + resumed_from_ + " at epoch " + std::to_string(pos_.epoch + 1) + ", step " +
                       std::to_string(pos_.step_in_epoch));
    // The epoch's checkpoint is written before its evaluation: a run that stopped between the two (a test file that
    // failed to decode, a kill) evaluates that epoch now, so it has its line like every other.
    if (log_finished_epoch_) {
        log_finished_epoch_ = false;
        evaluate_now();
        log_epoch(pos_.epoch);
    }
    if (parts_.world > 1) latency_probe_s_ = latency_probe(parts_.comm);  // ~1 ms, for "predicted"
}

void TrainingRun::load_resume_checkpoint() {
    const CheckpointPlan& k = plan_.checkpoint;
    if (k.resume.kind == ResumeFrom::Fresh) return;
    if (k.resume.kind == ResumeFrom::Path) {
        load_checkpoint_for_this_run(k.resume.path);
        return;
    }
    // Latest: the newest checkpoint that verifies (checkpoint.cpp's rule, shared with the sparse path).
    resume_newest(plan_.output.checkpoint_dir(), [this](const std::string& path) { load_checkpoint_for_this_run(path); });
}

// Loads `path` (rank 0) and checks it fits this run: the world size and the steps per epoch fix which samples each
// rank reads at each step, the learning-rate scaling and the dropout streams; resuming across a change would skip
// or repeat samples.
void TrainingRun::load_checkpoint_for_this_run(const std::string& path) {
    RankCopies copies;
    LoopState at = load_checkpoint(path, parts_.model->checkpoint_tensors(), parts_.opt.get(), &copies);
    check_checkpoint_classes(path, at.extra, parts_.data.train->class_names());
    if (at.world_size != parts_.world)
        throw InputError(path + ": written by a " + std::to_string(at.world_size) + "-rank run, this run has " +
                         std::to_string(parts_.world) + "; a changed world size would skip or repeat samples and "
                         "change the learning-rate scaling: resume with " + std::to_string(at.world_size) +
                         " ranks (mpirun -np " + std::to_string(at.world_size) +
                         "), or start a fresh run in another output.dir");
    // The same steps per epoch can hide a changed batch size or training set (512/31 and 512/32 both give 16), and
    // a new seed reshuffles the epoch under way (and is a new synthetic data set): each would repeat or skip samples.
    const json written = at.extra.is_object() ? at.extra.value("config", json()) : json();
    const json then_train = written.is_object() ? written.value("train", json::object()) : json::object();
    for (const auto& [key, now] : {std::pair<const char*, json>{"batch_size", plan_.train.batch_size},
                                   std::pair<const char*, json>{"seed", plan_.train.seed}}) {
        const json then = then_train.value(key, json());
        if (!then.is_null() && then != now)
            throw InputError(path + ": written with train." + key + " " + then.dump() + ", this run has " +
                             now.dump() + "; a change would repeat or skip samples: resume with train." + key + "=" +
                             then.dump() + ", or start a fresh run in another output.dir");
    }
    if (at.extra.is_object() && at.extra.contains("train_samples") &&
        at.extra["train_samples"] != json(parts_.data.train->size()))
        throw InputError(path + ": written for a training set of " + at.extra["train_samples"].dump() +
                         " samples, this run's has " + std::to_string(parts_.data.train->size()) +
                         "; a changed training set would repeat or skip samples: resume on the data that wrote it, "
                         "or start a fresh run in another output.dir");
    if (at.steps_per_epoch != steps_per_epoch_)
        throw InputError(path + ": written with " + std::to_string(at.steps_per_epoch) + " steps per epoch, this run "
                         "has " + std::to_string(steps_per_epoch_) + " (train.batch_size, the training set or "
                         "sync.backward_passes_per_step changed); resume with the settings that wrote it, or start a "
                         "fresh run in another output.dir");
    // Every rank's own tensors, where this run keeps the same ones per rank (a checkpoint without them, or a run
    // that switched between local SGD and allreduce, continues from the checkpoint's model and rank 0's state).
    last_average_step_ = at.global_step;  // the checkpoint's model is one model on every rank
    buffers_averaged_step_ = at.global_step;  // its buffers were averaged when it was written
    resumed_copies_ = {};
    if (own_ != OwnTensors::None && copies.cover(rank_tensors_first(), rank_tensors().size())) {
        if (own_ == OwnTensors::All) last_average_step_ = recorded_last_average_step(path, at);
        const auto it = at.extra.is_object() ? at.extra.find(kBuffersAveragedStep) : at.extra.end();
        buffers_averaged_step_ = it != at.extra.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
        resumed_copies_ = std::move(copies);
    }
    pos_ = std::move(at);
    resumed_from_ = path;
    parts_.dropout_rng.set_state(pos_.rng_states[parts_.rank]);
    if (const auto it = pos_.extra.find("finished_epoch_train_loss"); it != pos_.extra.end() && it->is_number())
        train_loss_ = it->get<double>();
    const LogWindow w = recorded_log_window(pos_);
    resumed_window_ = {0.0, w.steps, w.loss_sum, w.samples};
    resumed_local_ = recorded_epoch_loss(parts_.rank);
}

// This rank's sums of the epoch so far from the loaded checkpoint (rank 0's pos_), zero where it has none.
TrainingRun::LossSums TrainingRun::recorded_epoch_loss(int rank) const {
    const auto it = pos_.extra.is_object() ? pos_.extra.find(kEpochLossPerRank) : pos_.extra.end();
    if (it == pos_.extra.end() || !it->is_array() || it->size() != static_cast<size_t>(parts_.world)) return {};
    const json& mine = (*it)[static_cast<size_t>(rank)];
    if (!mine.is_array() || mine.size() != 2 || !mine[0].is_number() || !mine[1].is_number()) return {};
    return {mine[0].get<double>(), mine[1].get<double>()};
}

// Rank 0 only (inside resume's agreement). A fresh run never overwrites a previous run's metrics or checkpoints.
void TrainingRun::open_outputs() {
    const std::string dir = plan_.output.checkpoint_dir();
    const std::string metrics = plan_.output.dir + "/metrics.jsonl";
    if (plan_.checkpoint.resume.kind == ResumeFrom::Fresh && holds_previous_run(plan_.output.dir, dir))
        throw InputError("output.dir " + plan_.output.dir + " holds a previous run; use checkpoint.resume=auto to "
                         "continue it or choose another output.dir");
    fs::create_directories(dir);
    check_latest_pointer(dir);
    remove_stale_temporaries(dir);  // left by a run killed or failing while it wrote a checkpoint
    if (!resumed_from_.empty()) {
        report_set_aside(dir, set_aside_checkpoints_after(dir, pos_.global_step, resumed_from_), pos_.global_step);
        const bool epoch_logged = keep_metrics_up_to(metrics, pos_.epoch, pos_.global_step);
        log_finished_epoch_ = pos_.step_in_epoch == 0 && pos_.epoch > 0 && !epoch_logged;
    }
    metrics_ = telemetry::MetricsWriter(metrics, !resumed_from_.empty());
    // A resumed run adds a file of its own; its steps continue the earlier files' (global steps).
    if (plan_.output.tensorboard) tensorboard_ = telemetry::TensorBoardWriter(plan_.output.tensorboard_dir());
    // The steps after the checkpoint are trained again: hide what a run killed after it wrote of them.
    if (!resumed_from_.empty()) tensorboard_.restart_at(pos_.global_step + 1);
}

// Every rank takes rank 0's decision: its position, every rank's dropout RNG state, its parameters and optimizer
// state. When rank 0 starts fresh, nothing needs to travel: no other rank has read a checkpoint.
void TrainingRun::adopt_root_position() {
    TrainerParts& p = parts_;
    ResumePoint root{.resumed = resumed_from_.empty() ? 0 : 1,
                     .log_finished_epoch = log_finished_epoch_ ? 1 : 0,
                     .rank_copies = resumed_copies_.empty() ? 0 : 1,
                     .epoch = pos_.epoch,
                     .step_in_epoch = pos_.step_in_epoch,
                     .global_step = pos_.global_step,
                     .optimizer_steps = p.opt->steps_taken(),
                     .last_average_step = last_average_step_,
                     .buffers_averaged_step = buffers_averaged_step_,
                     .epoch_loss_sum = pos_.epoch_loss_sum,
                     .epoch_samples = pos_.epoch_samples,
                     .finished_epoch_train_loss = train_loss_};
    p.comm.broadcast_object(root, 0);
    if (root.resumed == 0) return;
    log_finished_epoch_ = root.log_finished_epoch != 0;
    train_loss_ = root.finished_epoch_train_loss;
    pos_.epoch = root.epoch;
    pos_.step_in_epoch = root.step_in_epoch;
    pos_.global_step = root.global_step;
    pos_.epoch_loss_sum = root.epoch_loss_sum;
    pos_.epoch_samples = root.epoch_samples;
    last_average_step_ = root.last_average_step;
    buffers_averaged_step_ = root.buffers_averaged_step;
    // Rank 0 checked the checkpoint's world size against this run's, so there is one state per rank.
    std::vector<Rng::State> rngs(p.world);
    if (p.is_root()) rngs = pos_.rng_states;
    p.comm.broadcast_bytes(std::as_writable_bytes(std::span<Rng::State>(rngs)), 0);
    p.dropout_rng.set_state(rngs[p.rank]);
    std::vector<LossSums> sums(p.world);
    if (p.is_root() && !resumed_from_.empty())
        for (int r = 0; r < p.world; ++r) sums[static_cast<size_t>(r)] = recorded_epoch_loss(r);
    p.comm.broadcast_bytes(std::as_writable_bytes(std::span<LossSums>(sums)), 0);
    resumed_local_ = sums[static_cast<size_t>(p.rank)];
    if (resumed_from_.empty()) resumed_from_ = "(rank 0's checkpoint)";
    sync::broadcast_from_root(p.comm, p.model->checkpoint_tensors(), p.opt->state());
    p.opt->set_steps_taken(root.optimizer_steps);
    if (root.rank_copies != 0) {
        // Each rank continues from its own tensors (local SGD's parameters and optimizer state, or BatchNorm's
        // running statistics), as in an uninterrupted run.
        const auto w = p.watch("the resume's sending of every rank's own tensors", 0, pos_.global_step);
        sync::scatter_from_root(p.comm, resumed_copies_.values, rank_tensors());
    }
    resumed_copies_ = {};
}

// ---- the step ----

bool TrainingRun::stop_at_max_steps() {
    if (plan_.train.max_steps > 0 && pos_.global_step >= plan_.train.max_steps) stopped_by_max_steps_ = true;
    return stopped_by_max_steps_;
}

void TrainingRun::begin_epoch() {
    epoch_t0_ = telemetry::now_seconds();
    epoch_local_ = resumed_local_;  // zero but on the first epoch of a run resumed inside it
    resumed_local_ = {};
    loader_.start_epoch(pos_.epoch, pos_.step_in_epoch * passes_);
    window_ = {telemetry::now_seconds(), 0, 0.0, 0.0};
    // Resumed inside an epoch: the steps the stopped run ran since its last logged one count towards the next line,
    // as in an uninterrupted run.
    if (resumed_window_.steps > 0) window_ = {window_.t0, resumed_window_.steps, resumed_window_.loss_sum,
                                               resumed_window_.samples};
    resumed_window_ = {};
}

float TrainingRun::run_step() {
    TrainerParts& p = parts_;
    if (steps_this_run_ == 1) phases_after_first_step_ = phases_;
    step_clock_.step_began();
    if (drain_before_step_) p.gsync->drain();
    p.gsync->begin_step(pos_.global_step);
    const double work_t0 = telemetry::now_seconds();
    double step_samples = 0.0;
    for (int64_t pass = 0; pass < passes_; ++pass) step_samples += forward_backward(pass);
    const double work_s = telemetry::now_seconds() - work_t0;
    if (!local_sgd_) {
        if (p.device == Device::CPU) work_log_.record(work_s);
        PhaseScope ph(phases_, Phase::SyncWait, p.timeline.get());
        p.gsync->synchronize();
    }
    const float lr = p.schedule->at(static_cast<double>(pos_.epoch) +
                                    static_cast<double>(pos_.step_in_epoch) / static_cast<double>(steps_per_epoch_));
    {
        PhaseScope ph(phases_, Phase::Optimizer, p.timeline.get());
        p.opt->step(lr);
    }
    epoch_local_.samples += step_samples;
    window_.samples += step_samples;
    ++pos_.step_in_epoch;
    ++pos_.global_step;
    ++steps_this_run_;
    ++window_.steps;
    if (local_sgd_ && p.device == Device::CPU) period_work_s_ += telemetry::now_seconds() - work_t0;
    if (local_sgd_ && pos_.global_step % plan_.sync.local_sgd_period == 0) {
        if (p.device == Device::CPU) period_work_log_.record(period_work_s_);
        period_work_s_ = 0;
        average_parameters_now();
    }
    if (balancer_) balance_batches(work_s, step_samples);
    agree_on_stop();
    step_clock_.step_ended();
    return lr;
}

void TrainingRun::balance_batches(double work_s, double samples) {
    balancer_->record(work_s, static_cast<int64_t>(samples));
    if (!balancer_->due()) return;
    // Communication on the training thread, like the wait for the gradients: timed as such.
    PhaseScope ph(phases_, Phase::SyncWait, parts_.timeline.get());
    // The loader may be reading its next step already (prefetch): the split holds from the one after.
    const auto w = parts_.watch("the speed balancer's exchange", 0, pos_.global_step);
    if (balancer_->exchange()) loader_.set_split(loader_.step() + 1, balancer_->counts());
}

void TrainingRun::agree_on_stop() {
    TrainerParts& p = parts_;
    if (stop_signal_ != 0) return;
    bool any = false;
    if (p.world == 1) {
        any = stop_.requested();
    } else if (!local_sgd_ && p.gsync->carries_vote()) {
        any = p.gsync->vote_any();
    } else if (local_sgd_ ? last_average_step_ == pos_.global_step
                          : pos_.step_in_epoch % plan_.train.log_every_steps == 0 ||
                                pos_.step_in_epoch == steps_per_epoch_) {
        // No vote rides in a gradient allreduce here: a one-value collective of its own, where it costs little.
        // Local SGD has no per-step collective: at each averaging (a stop waits up to local_sgd_period steps). On the
        // NCCL device path a host collective would make the host wait for the GPU every step, ending its run-ahead:
        // at logged steps, where the host reads the loss from the GPU anyway (a stop waits up to log_every_steps).
        // Timed as communication, like every wait on the other ranks (otherwise in no phase of the time split).
        PhaseScope ph(phases_, Phase::SyncWait, p.timeline.get());
        const auto w = p.watch("the stop vote", 0, pos_.global_step);
        any = any_rank_requested(p.comm, stop_);
    }
    if (!any) return;
    // Agreed at the run's last step where that is an epoch's end (the last epoch's, or max_steps' at an epoch end):
    // nothing is left to stop early, and the epoch's end evaluates anyway (as every epoch's end does, stopped or
    // not). The run finishes as usual (checkpoint, evaluation, summary; exit 0), as when the signal came after the
    // last vote. (A stop at max_steps' last step inside an epoch still stops: its final evaluation is left to the
    // resumed job, not spent from the grace period.) Every rank decides alike: the position and the plan only.
    const bool run_ends = pos_.epoch + 1 >= plan_.train.epochs ||
                          (plan_.train.max_steps > 0 && pos_.global_step >= plan_.train.max_steps);
    if (run_ends && pos_.step_in_epoch == steps_per_epoch_) {
        stop_.votes_over(/*agreed_at_last_step=*/true);
        return;
    }
    // The watchdog stays armed through agreed_signal's collective: a rank that voted and then stopped answering
    // (the vote can complete just before a peer freezes) must not hold this one past train.stop_grace_s.
    stop_signal_ = agreed_signal(p.comm, stop_);  // for the summary
    stop_.agreed();
}

double TrainingRun::forward_backward(int64_t pass) {
    TrainerParts& p = parts_;
    std::pair<const Tensor*, const Tensor*> xy;
    {
        // Data: the next batch, and on a GPU its (asynchronous) copy to the device.
        PhaseScope ph(phases_, Phase::Data, p.timeline.get());
        if (!loader_.next(batch_)) throw Error("data loader ended early at step " + std::to_string(pos_.step_in_epoch));
        xy = p.on_device(batch_);
    }
    const auto [x, y] = xy;
    {
        PhaseScope ph(phases_, Phase::Forward, p.timeline.get());
        const Tensor& logits = p.model->forward(*x, {true, &p.dropout_rng});
        p.model->loss().forward(logits, *y, pending_loss_);
    }
    PhaseScope ph(phases_, Phase::Backward, p.timeline.get());
    p.model->loss().backward(*y, loss_scale_, dlogits_);
    // Only the last pass's gradients are final; only they go to the allreduce (as they become ready).
    if (pass + 1 == passes_ && !local_sgd_) {
        step_clock_.backward_began();
        p.model->backward(dlogits_, [this, &p](nn::Parameter& prm) {
            step_clock_.ready(prm);
            p.gsync->on_gradient_ready(prm);
        }, pass > 0);
    } else {
        p.model->backward(dlogits_, {}, pass > 0);
    }
    return static_cast<double>(batch_.size());
}

// ---- around the step ----

void TrainingRun::read_loss() {
    // On a GPU the read waits for the step's gradient collectives too (the optimizer waits for them): wait for those
    // first where a stuck one is warned about and ends the job (GradientSync::drain; nothing to do on the CPU).
    parts_.gsync->drain();
    const ops::LossStats st = pending_loss_.take();
    if (!std::isfinite(st.loss_sum))
        throw Error("training diverged: the loss is " + std::to_string(st.loss_sum) + " at epoch " +
                    std::to_string(pos_.epoch + 1) + ", step " + std::to_string(pos_.step_in_epoch) + " on rank " +
                    std::to_string(parts_.rank) + " (lr " + std::to_string(parts_.schedule->at(pos_.epoch)) +
                    "); lower optimizer.lr, add warmup, or check the data normalisation");
    epoch_local_.loss += st.loss_sum;
    window_.loss_sum += st.loss_sum;
}

void TrainingRun::log_step(float lr, bool restart_window) {
    const double now = telemetry::now_seconds();
    const double sps =
        window_.steps * passes_ * plan_.train.batch_size * parts_.world / std::max(now - window_.t0, 1e-9);
    // The mean training loss of this rank over the steps since the last logged one.
    const double loss = window_.loss_sum / std::max(window_.samples, 1.0);
    metrics_.write({{"type", "step"}, {"epoch", pos_.epoch + 1}, {"step", pos_.step_in_epoch},
                    {"global_step", pos_.global_step}, {"loss", loss}, {"lr", lr}, {"samples_per_s", sps}});
    if (tensorboard_.enabled()) tensorboard_.scalars(pos_.global_step, {{"train/loss", loss}, {"train/lr", lr}, {"train/samples_per_s", sps}});
    progress_.step(pos_.epoch, plan_.train.epochs, pos_.step_in_epoch, steps_per_epoch_, loss, sps);
    if (restart_window) window_ = {now, 0, 0.0, 0.0};
}

TrainingRun::LossSums TrainingRun::epoch_sums_over_ranks() {
    double sums[2] = {epoch_local_.loss, epoch_local_.samples};
    const auto w = parts_.watch("the epoch's loss allreduce", sizeof sums, pos_.global_step);
    parts_.comm.allreduce(std::span<double>(sums, 2), comm::ReduceOp::Sum);
    return {sums[0], sums[1]};
}

void TrainingRun::write_step_checkpoint() {
    const double t0 = telemetry::now_seconds();
    // Local SGD averages nothing here: write_checkpoint saves the ranks' average without making it, so the checkpoint
    // schedule leaves the run as it is.
    write_checkpoint(pos_);  // with every rank's epoch_local_
    if (parts_.world > 1) {
        // Every rank waits here for rank 0's write: otherwise the others would wait for it inside the next step's
        // allreduce, and it would count as communication (sync_wait, the buckets' times, the run's prediction).
        AddSeconds timed(checkpoint_seconds_);
        const auto w = parts_.watch("the barrier after a step checkpoint", 0, pos_.global_step);
        parts_.comm.barrier();
    }
    // Training time leaves the write out, as it leaves out the epoch's checkpoint: samples_per_s and the step lines'
    // samples/s measure training (checkpoint_s has the time).
    const double spent = telemetry::now_seconds() - t0;
    epoch_t0_ += spent;
    window_.t0 += spent;
}

void TrainingRun::end_epoch() {
    if (pending_loss_.pending()) read_loss();  // stopped by max_steps between reads
    const LossSums all = epoch_sums_over_ranks();
    train_seconds_ += telemetry::now_seconds() - epoch_t0_;
    if ((stopped_by_max_steps_ || stopped_by_signal()) && pos_.step_in_epoch < steps_per_epoch_) {
        // The position stays inside the epoch, for the final checkpoint (which records each rank's epoch_local_).
        const double samples = pos_.epoch_samples + all.samples;
        if (samples > 0) train_loss_ = (pos_.epoch_loss_sum + all.loss) / samples;
        return;
    }
    pos_.epoch_loss_sum += all.loss;
    pos_.epoch_samples += all.samples;
    epoch_local_ = {};  // in pos_ now; the epoch's checkpoint below starts the next epoch
    train_loss_ = pos_.epoch_samples > 0 ? pos_.epoch_loss_sum / pos_.epoch_samples : std::nan("");
    const int64_t finished = pos_.epoch + 1;
    ++pos_.epoch;
    pos_.step_in_epoch = 0;
    pos_.epoch_loss_sum = 0;
    pos_.epoch_samples = 0;
    // The epoch's checkpoint comes before its evaluation: a test split that fails there (an image folder's bad file
    // is first decoded by the first evaluation) must not throw away the epoch's training.
    const int64_t every = plan_.checkpoint.every_epochs;
    if (every > 0 && pos_.epoch % every == 0) {
        // The one model the evaluation will see, averaged before the checkpoint: a resumed run whose epoch line was
        // written does not evaluate again, and must continue from what the evaluation left (local SGD's per-rank
        // copies included).
        average_parameters_now();
        average_buffers_now();
        write_checkpoint(pos_);
    }
    evaluate_now();
    log_epoch(finished);
}

// The epoch line (metrics.jsonl, TensorBoard, progress) of epoch `finished` (1-based), after its evaluation.
void TrainingRun::log_epoch(int64_t finished) {
    json rec = {{"type", "epoch"}, {"epoch", finished}, {"global_step", pos_.global_step},
                {"train_loss", train_loss_}, {"wall_s", telemetry::now_seconds() - t_start_}};
    rec.update(last_eval_);
    metrics_.write(rec);
    if (tensorboard_.enabled()) tensorboard_.scalars(pos_.global_step, epoch_scalars());
    std::ostringstream os;
    os.precision(4);
    os << "epoch " << finished << "/" << plan_.train.epochs << ": train loss " << train_loss_ << ", test loss "
       << last_eval_["test_loss"].get<double>() << ", test accuracy " << last_eval_["test_accuracy"].get<double>();
    progress_.line(os.str());
}

void TrainingRun::finish() {
    progress_.finish();
    // The final position is always saved, so a run stopped by max_steps resumes where it stopped; a run stopped by a
    // signal saves it even with checkpoints off (what the stop is for), unless that position was just written. Saved
    // before the final average below: local SGD's checkpoint holds each rank's own parameters as they are at this
    // step in an uninterrupted run (a max_steps stop between averages).
    const int64_t every = plan_.checkpoint.every_epochs;
    if (stopped_by_signal()) {
        if (last_checkpoint_step_ != pos_.global_step) write_checkpoint(pos_);
    } else if (plan_.checkpoint.enabled() && steps_this_run_ > 0 &&
               (stopped_by_max_steps_ || every == 0 || pos_.epoch % every != 0)) {
        write_checkpoint(pos_);
    }
    average_parameters_now();  // local_sgd: the run ends with one model on every rank
    // A run stopped by max_steps inside an epoch (also one whose last evaluation was at an earlier epoch's end), or
    // resumed at its end after that epoch's evaluation failed (the checkpoint is written first), still reports the
    // final model's test figures. A signal stop does not spend its grace period on one.
    if (!stopped_by_signal() && last_eval_step_ != pos_.global_step) evaluate_now();
}

void TrainingRun::write_checkpoint(const LoopState& at) {
    AddSeconds timed(checkpoint_seconds_);
    TrainerParts& p = parts_;
    p.gsync->drain();  // the GPU's last gradient collectives, watched, before the tensors' copies to the host
    // Every rank's dropout RNG goes into the checkpoint so a resumed job continues exactly.
    std::vector<Rng::State> states;
    {
        const auto w = p.watch("the checkpoint's gathering of RNG states", sizeof(Rng::State), at.global_step);
        states = p.comm.allgather_object(p.dropout_rng.state());
    }
    std::vector<LossSums> epoch_sums;
    {
        const auto w = p.watch("the checkpoint's gathering of the epoch's loss sums", sizeof(LossSums), at.global_step);
        epoch_sums = p.comm.allgather_object(epoch_local_);
    }
    // Collectives, before rank 0 alone writes. Local SGD with several ranks: the ranks' average as the model, made
    // aside, and every rank's own tensors; otherwise the BatchNorm buffers' average, made aside too: averaging them
    // in place would make the checkpoint schedule change the run (an uninterrupted run averages them only for its
    // evaluations). At an epoch's end the evaluation that follows makes the same average in place, the same bits.
    std::vector<nn::Parameter> averaged = own_ == OwnTensors::All ? averaged_model() : averaged_buffers();
    RankCopies copies;
    if (own_ != OwnTensors::None) {
        const auto w = p.watch("the checkpoint's gathering of every rank's tensors", 0, at.global_step);
        copies = {p.world, sync::gather_to_root(p.comm, rank_tensors()), rank_tensors_first()};
    }
    last_checkpoint_step_ = at.global_step;
    if (!p.is_root()) return;
    LoopState full = at;
    full.rng_states = std::move(states);
    full.steps_per_epoch = steps_per_epoch_;
    full.world_size = p.world;
    full.extra = {{"config", p.config.document()}, {"train_samples", p.data.train->size()}};
    if (const auto classes = p.data.train->class_names(); !classes.empty()) full.extra["classes"] = classes;
    // At an epoch's end: its training loss, for the epoch line a resumed run writes if this run stops before it.
    if (at.step_in_epoch == 0 && at.epoch > 0 && std::isfinite(train_loss_))
        full.extra["finished_epoch_train_loss"] = train_loss_;
    // Inside an epoch: rank 0's steps since its last metrics line (a max_steps stop, a checkpoint step that is not a
    // log step).
    record_log_window(full, {window_.steps, window_.loss_sum, window_.samples});
    full.extra[kEpochLossPerRank] = json::array();
    for (const LossSums& e : epoch_sums) full.extra[kEpochLossPerRank].push_back({e.loss, e.samples});
    if (own_ == OwnTensors::All) record_last_average_step(full, last_average_step_);
    if (own_ != OwnTensors::None) full.extra[kBuffersAveragedStep] = buffers_averaged_step_;
    std::vector<nn::Parameter*> model = p.model->checkpoint_tensors();  // parameters, then buffers
    if (own_ == OwnTensors::All)
        for (size_t i = 0; i < model.size(); ++i) model[i] = &averaged[i];
    else
        for (size_t i = 0; i < averaged.size(); ++i) model[model.size() - averaged.size() + i] = &averaged[i];
    const std::string dir = plan_.output.checkpoint_dir();
    const std::string name = checkpoint_file_name(at.global_step);
    save_checkpoint(dir + "/" + name, model, p.opt.get(), full, copies);
    publish_checkpoint(dir, name, plan_.checkpoint.keep);
}

namespace {

// Parameters named as `names` holding `values` (copies made aside for a checkpoint).
std::vector<nn::Parameter> named_copies(const std::vector<nn::Parameter*>& names, std::vector<Tensor> values) {
    std::vector<nn::Parameter> out(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
        out[i].name = names[i]->name;
        out[i].value = std::move(values[i]);
    }
    return out;
}

}  // namespace

// Local SGD with several ranks: the model a checkpoint holds, the ranks' average of the parameters and the BatchNorm
// buffers, made aside: an average the schedule does not make would change the rest of the run. Right after an
// average the parameters are one model already: copied as they are. Collective.
std::vector<nn::Parameter> TrainingRun::averaged_model() {
    TrainerParts& p = parts_;
    const auto w = p.watch("the checkpoint's average of the ranks' models", 0, pos_.global_step);
    std::vector<Tensor> values = p.averager->averaged_copies(last_average_step_ == pos_.global_step);
    for (Tensor& b : p.buffer_averager->averaged_copies(buffers_averaged_step_ == pos_.global_step))
        values.push_back(std::move(b));
    return named_copies(p.model->checkpoint_tensors(), std::move(values));  // parameters, then buffers
}

// Every rank's BatchNorm buffers averaged into copies (their names kept), as average_buffers_now() would average
// them in place; none with one rank or no buffers. Collective.
std::vector<nn::Parameter> TrainingRun::averaged_buffers() {
    TrainerParts& p = parts_;
    const std::vector<nn::Parameter*>& names = p.model->buffers();
    if (p.world == 1 || names.empty()) return {};
    const auto w = p.watch("the checkpoint's average of the BatchNorm buffers", 0, pos_.global_step);
    return named_copies(names, p.buffer_averager->averaged_copies(buffers_averaged_step_ == pos_.global_step));
}

// The tensors each rank keeps as its own (own_), in a checkpoint's order: local SGD's parameters, buffers and
// optimizer state, or the buffers alone.
std::vector<Tensor*> TrainingRun::rank_tensors() {
    std::vector<Tensor*> t;
    if (own_ == OwnTensors::None) return t;
    for (nn::Parameter* prm : own_ == OwnTensors::All ? parts_.model->checkpoint_tensors() : parts_.model->buffers())
        t.push_back(&prm->value);
    if (own_ == OwnTensors::All)
        for (auto& [name, state] : parts_.opt->state()) t.push_back(state);
    return t;
}

size_t TrainingRun::rank_tensors_first() const {
    return own_ == OwnTensors::Buffers ? parts_.model->parameters().size() : 0;  // the buffers follow the parameters
}

std::vector<telemetry::Scalar> TrainingRun::epoch_scalars() const {
    std::vector<telemetry::Scalar> v = telemetry::epoch_scalars(train_loss_, last_eval_, phases_, train_seconds_);
    v.push_back({"time/eval_s", eval_seconds_});
    const TrainerParts& p = parts_;
    v.push_back({"comm/bytes_sent", double(p.comm.bytes_sent() + p.gsync->communicator().bytes_sent())});
    v.push_back({"comm/bytes_received", double(p.comm.bytes_received() + p.gsync->communicator().bytes_received())});
    return v;
}

// local_sgd: ranks drift apart between averagings; average before anything that must see one model.
void TrainingRun::average_parameters_now() {
    if (!local_sgd_ || last_average_step_ == pos_.global_step) return;
    PhaseScope ph(phases_, Phase::SyncWait, parts_.timeline.get());
    const auto w = parts_.watch("the local SGD parameter average", 0, pos_.global_step);
    parts_.averager->average();
    ++averages_;
    last_average_step_ = pos_.global_step;
}

// BatchNorm's running statistics come from each rank's own batches: averaged (as the issue asks, rather than DDP's
// broadcast of rank 0's) before evaluation and checkpoints, so every rank evaluates and saves the same model. The
// averager fuses them into few allreduces and stages a GPU model's through host memory (the communicator reads host
// memory only).
void TrainingRun::average_buffers_now() {
    if (buffers_averaged_step_ == pos_.global_step) return;  // equal already; a second average could move a last bit
    const auto w = parts_.watch("the BatchNorm buffers' average", 0, pos_.global_step);
    parts_.buffer_averager->average();
    buffers_averaged_step_ = pos_.global_step;
}

// Evaluation on one model (local SGD averages first), timed apart from training.
void TrainingRun::evaluate_now() {
    // One span around it, so that its layers' spans (the training names) read as an evaluation in the timeline.
    telemetry::Span span(parts_.timeline.get(), "evaluate", "phase");
    const double t0 = telemetry::now_seconds();
    parts_.gsync->drain();  // the GPU's last gradient collectives, watched under their own name (the averages read them)
    average_parameters_now();
    average_buffers_now();
    last_eval_ = parts_.evaluate(pos_.global_step);
    last_eval_step_ = pos_.global_step;
    eval_seconds_ += telemetry::now_seconds() - t0;
}

}  // namespace ringtrain::train::detail

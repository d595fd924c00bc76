#include "ringtrain/train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "datasets.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"
#include "ringtrain/data/sharded_loader.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/ops/threads.hpp"
#include "ringtrain/optim/optimizer.hpp"
#include "ringtrain/optim/schedule.hpp"
#include "ringtrain/sync/consistency.hpp"
#include "ringtrain/sync/gradient_sync.hpp"
#include "ringtrain/telemetry/gpu_monitor.hpp"
#include "ringtrain/telemetry/metrics_writer.hpp"
#include "ringtrain/telemetry/phases.hpp"
#include "ringtrain/telemetry/progress.hpp"
#include "ringtrain/telemetry/resources.hpp"
#include "ringtrain/telemetry/straggler.hpp"
#include "ringtrain/telemetry/timeline.hpp"
#include "ringtrain/train/checkpoint.hpp"

namespace ringtrain::train {

using nlohmann::json;
namespace fs = std::filesystem;
using telemetry::Phase;
using telemetry::ScopedPhase;

namespace {

Device pick_device(const std::string& wanted) {
    if (wanted == "cuda") {
        if (!cuda_available())
            throw InputError("device: cuda was asked for but " +
                             std::string("this build has no CUDA support or no GPU is visible; set device to cpu or auto"));
        return Device::CUDA;
    }
    if (wanted == "auto" && cuda_available()) return Device::CUDA;
    return Device::CPU;
}

// data.prefetch true asks for a prefetch thread where it can pay. On the CPU it only hides filling if it has a core
// that the compute threads do not use: with as many compute threads as usable CPUs (mpirun --bind-to core, srun
// --cpu-bind with one CPU per task, 1 thread per rank), it can only time-slice with them, adding hand-overs and
// making each rank's step time jitter, which a synchronous job pays for at every step (measured: bench/RESULTS.md).
// On a GPU the host thread mostly queues work, so the prefetch thread has the core to itself.
void set_prefetch(data::LoaderOptions& lo, const Config& cfg, Device device) {
    lo.prefetch = cfg.boolean("data.prefetch");
    const int cpus = ops::usable_cpus(), threads = static_cast<int>(cfg.integer("train.threads"));
    if (lo.prefetch && device == Device::CPU && cpus <= threads) {
        lo.prefetch = false;
        lo.prefetch_off_reason = std::to_string(cpus) + " usable CPU" + (cpus == 1 ? "" : "s") + " for " +
                                 std::to_string(threads) + " compute thread" + (threads == 1 ? "" : "s") +
                                 ": a prefetch thread could only time-slice with them";
    }
}

// Per-rank dropout streams differ (each rank drops different units, as in Horovod/DDP) but are reproducible.
uint64_t dropout_seed(uint64_t seed, int rank) { return seed * 0x9E3779B97F4A7C15ULL + 0x5851F42D4C957F2DULL * (rank + 1); }

// Times one phase of a step into the run's totals and, when a timeline is on, draws it as a span.
class PhaseScope {
public:
    PhaseScope(telemetry::PhaseTimes& t, Phase p, telemetry::Timeline* tl)
        : timer_(t, p), span_(tl, telemetry::phase_name(p), "phase") {}

private:
    ScopedPhase timer_;
    telemetry::Span span_;
};

// summary.json "stragglers": how much of the run the ranks waited for the slowest one's local work.
json stragglers_json(const telemetry::StragglerReport& r, double train_s, uint64_t dropped, bool local_sgd,
                     Device device) {
    if (r.steps == 0) {
        const char* why = local_sgd ? "sync.mode local_sgd has no per-step synchronisation"
                          : device != Device::CPU ? "measured on the CPU only (on a GPU the host only queues work)"
                                                  : "no synchronised step in this run";
        return {{"steps", 0}, {"why", why}};
    }
    return {{"steps", r.steps},
            {"steps_not_measured", dropped},
            {"mean_work_ms", 1e3 * r.work_s / static_cast<double>(r.steps)},
            {"wait_for_slowest_s", r.straggler_s},
            {"wait_for_slowest_fraction", train_s > 0 ? r.straggler_s / train_s : 0.0},
            {"slowest_steps_per_rank", r.slowest_steps_per_rank},
            {"mean_work_ms_per_rank", r.mean_work_ms_per_rank}};
}

}  // namespace

struct Trainer::State {
    const Config& cfg;
    comm::Communicator& comm;
    int rank, world;
    Device device = Device::CPU;
    detail::Datasets data;
    Rng init_rng;
    Rng dropout_rng;
    std::unique_ptr<nn::Model> model;
    std::unique_ptr<optim::Optimizer> opt;
    std::unique_ptr<optim::LrSchedule> schedule;
    std::unique_ptr<telemetry::Timeline> timeline;
    std::unique_ptr<sync::GradientSync> gsync;
    std::unique_ptr<sync::ParameterAverager> averager;
    std::unique_ptr<telemetry::GpuMonitor> gpu_monitor;  // this rank's GPU, while training (NVML, where present)
    std::string gpu_monitor_why;                         // why there is none
    std::string out_dir, ckpt_dir;
    int64_t batch = 0;

    State(const Config& c, comm::Communicator& cm)
        : cfg(c), comm(cm), rank(cm.rank()), world(cm.size()),
          init_rng(static_cast<uint64_t>(c.integer("train.seed"))),
          dropout_rng(dropout_seed(static_cast<uint64_t>(c.integer("train.seed")), cm.rank())) {}

    bool is_root() const { return rank == 0; }

    // The batch on the compute device: CPU batches are used as they are; for a GPU they are copied over
    // asynchronously (pinned staging, a copy stream of its own), so the host never waits for the GPU here.
    std::string device_name = "cpu";
    std::unique_ptr<AsyncUploader> uploader;
    std::pair<const Tensor*, const Tensor*> on_device(const data::Batch& b) {
        if (device == Device::CPU) return {&b.x, &b.y};
        const Tensor* host[2] = {&b.x, &b.y};
        const auto dev = uploader->upload(host);
        return {&dev[0], &dev[1]};
    }

    // Test-set accuracy and loss over all ranks' shares (exact global values).
    json evaluate() {
        data::LoaderOptions lo;
        lo.batch_size = cfg.integer("train.eval_batch_size");
        lo.rank = rank;
        lo.world = world;
        lo.mode = data::LoaderMode::Eval;
        set_prefetch(lo, cfg, device);
        lo.workers = static_cast<int>(cfg.integer("data.workers"));
        data::ShardedLoader loader(*data.test, lo);
        loader.start_epoch(0);
        data::Batch b;
        double sums[3] = {0, 0, 0};  // loss sum, correct, samples
        nn::ForwardContext ctx{false, nullptr};
        ops::LossTotals totals;  // read once at the end: no host round trip per batch on a GPU
        while (loader.next(b)) {
            const auto [x, y] = on_device(b);
            const Tensor& logits = model->forward(*x, ctx);
            model->loss().forward(logits, *y, totals);
            sums[2] += static_cast<double>(b.size());
        }
        const auto st = totals.take();
        sums[0] = st.loss_sum;
        sums[1] = static_cast<double>(st.correct);
        comm.allreduce(std::span<double>(sums, 3), comm::ReduceOp::Sum);
        const double n = std::max(sums[2], 1.0);
        return {{"test_loss", sums[0] / n}, {"test_accuracy", sums[1] / n}, {"test_samples", sums[2]}};
    }
};

Trainer::Trainer(const Config& cfg, comm::Communicator& comm) : s_(std::make_unique<State>(cfg, comm)) {
    sync::run_then_agree(comm, [&] { build_locally(); });
    build_collectively();
}

void Trainer::build_locally() {
    State& s = *s_;
    const Config& cfg = s.cfg;
    ops::set_intra_op_threads(static_cast<int>(cfg.integer("train.threads")));
    s.device = pick_device(cfg.string("device"));
    // NCCL compresses on the GPU (GradientSync's device path); a CPU model on nccl has no 16-bit path.
    if (cfg.string("sync.backend") == "nccl" && cfg.string("sync.compression") != "none" && s.device != Device::CUDA)
        throw InputError("sync.compression: " + cfg.string("sync.compression") +
                         " with sync.backend nccl needs the model on a GPU (device: cuda); use none, or the ring or "
                         "mpi backend");
    s.batch = cfg.integer("train.batch_size");
    s.data = detail::make_datasets(cfg);
    s.model = std::make_unique<nn::Model>(nn::Model::from_file(cfg.model_path(), s.data.train->sample_shape(), s.init_rng));
    const auto out = s.model->output_shape();
    const bool bce = s.model->loss().type() == "sigmoid_bce";
    const int64_t want_outputs = bce ? 1 : s.data.train->num_classes();
    if (out.size() != 1 || out[0] != want_outputs)
        throw InputError(cfg.model_path() + ": the model ends in shape " + shape_string(out) + " but the data set has " +
                         std::to_string(s.data.train->num_classes()) + " classes; the last layer needs " +
                         std::to_string(want_outputs) + " outputs");
    s.model->set_profile(cfg.boolean("train.profile_layers"));
    if (s.device == Device::CUDA) {
        // One GPU per rank: local rank modulo the visible GPUs (Slurm's --gpus-per-task shows each task one).
        select_cuda_device(s.comm.local_rank());
        s.device_name = cuda_device_description();
        s.gpu_monitor = telemetry::GpuMonitor::open(cuda_pci_bus_id(), &s.gpu_monitor_why);
        s.model->to(Device::CUDA);
        s.uploader = std::make_unique<AsyncUploader>();
    }
    build_optimizer();
}

void Trainer::build_optimizer() {
    State& s = *s_;
    const Config& cfg = s.cfg;

    optim::OptimizerOptions oo;
    oo.name = cfg.string("optimizer.name");
    oo.momentum = static_cast<float>(cfg.number("optimizer.momentum"));
    oo.nesterov = cfg.boolean("optimizer.nesterov");
    oo.weight_decay = static_cast<float>(cfg.number("optimizer.weight_decay"));
    oo.beta1 = static_cast<float>(cfg.number("optimizer.beta1"));
    oo.beta2 = static_cast<float>(cfg.number("optimizer.beta2"));
    oo.rho = static_cast<float>(cfg.number("optimizer.rho"));
    oo.eps = cfg.is_null("optimizer.eps") ? (oo.name == "adadelta" ? 1e-6f : 1e-8f)
                                          : static_cast<float>(cfg.number("optimizer.eps"));
    s.opt = optim::make_optimizer(oo, s.model->parameters());

    optim::ScheduleOptions so;
    so.lr = static_cast<float>(cfg.number("optimizer.lr"));
    so.scaling = cfg.string("optimizer.lr_scaling");
    so.decay = cfg.string("optimizer.schedule");
    so.warmup_epochs = cfg.number("optimizer.warmup_epochs");
    so.warmup_start_lr = cfg.is_null("optimizer.warmup_start_lr") ? -1.0 : cfg.number("optimizer.warmup_start_lr");
    so.step_epochs = cfg.number("optimizer.step_epochs");
    so.gamma = cfg.number("optimizer.gamma");
    so.min_lr_factor = cfg.number("optimizer.min_lr_factor");
    so.total_epochs = static_cast<double>(cfg.integer("train.epochs"));
    s.schedule = std::make_unique<optim::LrSchedule>(so, s.world);
}

void Trainer::build_collectively() {
    State& s = *s_;
    const Config& cfg = s.cfg;
    comm::Communicator& comm = s.comm;

    // Every rank must build the same model before any gradient is averaged; then all start from rank 0's values.
    sync::verify_same_parameters(comm, s.model->parameters());
    sync::broadcast_from_root(comm, s.model->parameters(), s.opt->state());
    s.timeline = std::make_unique<telemetry::Timeline>(cfg.string("output.timeline"), s.rank,
                                                       !cfg.string("output.timeline").empty());
    sync::SyncOptions so;
    so.fusion_bytes = static_cast<size_t>(cfg.integer("sync.fusion_bytes"));
    so.overlap = cfg.boolean("sync.overlap");
    so.cycle_time_ms = cfg.number("sync.cycle_time_ms");
    so.min_bucket_bytes = static_cast<size_t>(cfg.integer("sync.min_bucket_bytes"));
    const std::string compression = cfg.string("sync.compression");
    so.wire = compression == "fp16"   ? comm::WireFormat::Float16
              : compression == "bf16" ? comm::WireFormat::BFloat16
                                      : comm::WireFormat::Float32;
    so.stall_warning_s = cfg.number("sync.stall_warning_s");
    so.stall_abort_s = cfg.number("sync.stall_abort_s");
    // Gradients travel on a communicator of their own, used only by GradientSync's communication thread.
    s.gsync = std::make_unique<sync::GradientSync>(comm::make_communicator(comm.backend()), s.model->parameters(), so,
                                                   s.timeline.get());
    s.averager = std::make_unique<sync::ParameterAverager>(comm, s.model->parameters(), so.fusion_bytes);
    if (s.timeline->enabled()) {
        telemetry::Timeline* tl = s.timeline.get();
        s.model->set_layer_observer([tl](const std::string& layer, bool backward, double a, double b) {
            const int64_t end = tl->now_us();
            tl->add((backward ? "backward " : "forward ") + layer, "layer", end - static_cast<int64_t>((b - a) * 1e6),
                    static_cast<int64_t>((b - a) * 1e6));
        });
    }

    s.out_dir = cfg.string("output.dir");
    s.ckpt_dir = s.out_dir + "/checkpoints";
}

Trainer::~Trainer() = default;

uint64_t Trainer::parameter_hash() const { return sync::parameter_value_hash(s_->model->parameters()); }

std::vector<float> Trainer::parameters_flat() const {
    std::vector<float> v;
    for (auto* p : s_->model->parameters()) v.insert(v.end(), p->value.data(), p->value.data() + p->value.numel());
    return v;
}

json Trainer::train() {
    State& s = *s_;
    const Config& cfg = s.cfg;
    const double t_start = telemetry::now_seconds();
    const int64_t epochs = cfg.integer("train.epochs");
    const int64_t max_steps = cfg.integer("train.max_steps");
    const int64_t log_every = cfg.integer("train.log_every_steps");
    const int64_t ckpt_every_epochs = cfg.integer("checkpoint.every_epochs");
    const int64_t ckpt_every_steps = cfg.integer("checkpoint.every_steps");
    const bool checkpointing = ckpt_every_epochs > 0 || ckpt_every_steps > 0;

    data::LoaderOptions lo;
    lo.batch_size = s.batch;
    lo.seed = static_cast<uint64_t>(cfg.integer("train.seed"));
    lo.rank = s.rank;
    lo.world = s.world;
    lo.mode = data::LoaderMode::Train;
    set_prefetch(lo, cfg, s.device);
    lo.workers = static_cast<int>(cfg.integer("data.workers"));
    data::ShardedLoader loader(*s.data.train, lo);
    // With gradient accumulation a step is `passes` loader batches: k local backward passes, one allreduce.
    const int64_t passes = cfg.integer("sync.backward_passes_per_step");
    const int64_t steps_per_epoch = loader.steps_per_epoch() / passes;
    if (steps_per_epoch == 0)
        throw InputError("train.batch_size: " + std::to_string(s.batch) + " per rank x " + std::to_string(s.world) +
                         " ranks is more than the " + std::to_string(s.data.train->size()) +
                         " training samples (with sync.backward_passes_per_step " + std::to_string(passes) +
                         "); use a smaller batch or fewer ranks");

    // ---- resume, then outputs (rank 0 only); a failure on any rank ends the job on all of them ----
    LoopState loop;
    std::string resumed_from;
    telemetry::MetricsWriter metrics;
    sync::run_then_agree(s.comm, [&] {
        const std::string resume = cfg.string("checkpoint.resume");
        if (!resume.empty()) {
            const std::string path = resume == "auto" ? latest_checkpoint(s.ckpt_dir) : resume;
            if (!path.empty()) {
                loop = load_checkpoint(path, s.model->parameters(), s.opt.get());
                resumed_from = path;
                if (static_cast<int>(loop.rng_states.size()) == s.world)
                    s.dropout_rng.set_state(loop.rng_states[s.rank]);
            } else if (resume != "auto") {
                throw InputError("checkpoint.resume: '" + resume + "' not found");
            }
        }
        if (s.is_root()) {
            fs::create_directories(s.ckpt_dir);
            metrics = telemetry::MetricsWriter(s.out_dir + "/metrics.jsonl", !resumed_from.empty());
        }
    });
    // Ranks on separate file systems may have read different files (or none): rank 0's state wins.
    if (s.world > 1) {
        double pos[6] = {resumed_from.empty() ? 0.0 : 1.0, double(loop.epoch), double(loop.step_in_epoch),
                         double(loop.global_step), loop.epoch_loss_sum, loop.epoch_samples};
        s.comm.broadcast_bytes(std::as_writable_bytes(std::span<double>(pos, 6)), 0);
        if (pos[0] != 0.0) {
            loop.epoch = static_cast<int64_t>(pos[1]);
            loop.step_in_epoch = static_cast<int64_t>(pos[2]);
            loop.global_step = static_cast<int64_t>(pos[3]);
            loop.epoch_loss_sum = pos[4];
            loop.epoch_samples = pos[5];
            std::vector<Rng::State> rngs(s.world, s.dropout_rng.state());
            if (s.is_root() && static_cast<int>(loop.rng_states.size()) == s.world) rngs = loop.rng_states;
            s.comm.broadcast_bytes(std::as_writable_bytes(std::span<Rng::State>(rngs)), 0);
            s.dropout_rng.set_state(rngs[s.rank]);
            if (resumed_from.empty()) resumed_from = "(rank 0's checkpoint)";
            sync::broadcast_from_root(s.comm, s.model->parameters(), s.opt->state());
            double opt_steps = static_cast<double>(s.opt->steps_taken());
            s.comm.broadcast_bytes(std::as_writable_bytes(std::span<double>(&opt_steps, 1)), 0);
            s.opt->set_steps_taken(static_cast<int64_t>(opt_steps));
        }
    }
    telemetry::Progress progress(cfg.string("output.progress"), s.is_root(), log_every);
    if (!resumed_from.empty())
        progress.line("resumed from " + resumed_from + " at epoch " + std::to_string(loop.epoch + 1) + ", step " +
                      std::to_string(loop.step_in_epoch));

    auto write_checkpoint = [&](const LoopState& st) {
        // Every rank's dropout RNG goes into the checkpoint so a resumed job continues exactly.
        std::vector<Rng::State> states(s.world);
        const auto mine = s.dropout_rng.state();
        for (int w = 0; w < 4; ++w) {
            const auto all = s.comm.allgather(mine[w]);
            for (int r = 0; r < s.world; ++r) states[r][w] = all[r];
        }
        if (!s.is_root()) return;
        LoopState full = st;
        full.rng_states = states;
        full.extra = {{"world_size", s.world}, {"config", cfg.document()}};
        const std::string name = checkpoint_file_name(st.global_step);
        save_checkpoint(s.ckpt_dir + "/" + name, s.model->parameters(), s.opt.get(), full);
        publish_checkpoint(s.ckpt_dir, name, cfg.integer("checkpoint.keep"));
    };

    telemetry::PhaseTimes phases;
    // Local work per synchronised step (CPU only: on a GPU the host only queues work), for the straggler report.
    telemetry::StepWorkLog work_log;
    data::Batch batch;
    ops::LossTotals pending_loss;  // this rank's training losses not yet read by the host
    Tensor dlogits;
    json last_eval = {{"test_loss", nullptr}, {"test_accuracy", nullptr}};
    double train_loss = std::nan("");
    double train_seconds = 0.0, eval_seconds = 0.0;
    if (s.gpu_monitor) s.gpu_monitor->start(0.1);
    int64_t steps_this_run = 0;
    bool stopped_by_max_steps = false;
    // Each pass's gradient is scaled so the accumulated one is the mean over the step's passes x batch samples.
    const float loss_scale = 1.0f / static_cast<float>(s.batch * passes);
    const bool local_sgd = cfg.string("sync.mode") == "local_sgd";
    const int64_t local_sgd_period = cfg.integer("sync.local_sgd_period");
    int64_t last_average_step = loop.global_step;
    // local_sgd: ranks drift apart between averagings; average before anything that must see one model.
    auto average_parameters_now = [&] {
        if (!local_sgd || last_average_step == loop.global_step) return;
        PhaseScope p(phases, Phase::SyncWait, s.timeline.get());
        s.averager->average();
        last_average_step = loop.global_step;
    };

    // Evaluation on one model (local SGD averages first), timed apart from training.
    auto evaluate_now = [&] {
        const double eval_t0 = telemetry::now_seconds();
        average_parameters_now();
        last_eval = s.evaluate();
        eval_seconds += telemetry::now_seconds() - eval_t0;
    };

    int64_t epoch = loop.epoch;
    for (; epoch < epochs && !stopped_by_max_steps; ++epoch) {
        const double epoch_t0 = telemetry::now_seconds();
        const int64_t first = epoch == loop.epoch ? loop.step_in_epoch : 0;
        double loss_sum = epoch == loop.epoch ? loop.epoch_loss_sum : 0.0;
        double loss_samples = epoch == loop.epoch ? loop.epoch_samples : 0.0;
        // loss_sum/loss_samples hold all ranks' totals at checkpoint time; keep local additions separate.
        double local_sum = 0.0, local_samples = 0.0;
        loader.start_epoch(epoch, first * passes);
        double window_t0 = telemetry::now_seconds();
        int64_t window_steps = 0;
        double window_loss_sum = 0.0, window_samples = 0.0;
        // The step's losses stay on the device until the host needs them: every step on the CPU (free there), at
        // log steps, checkpoints and the epoch's end on a GPU, so the host can queue the next step meanwhile.
        // A non-finite loss is found at that read, and the error names the step it was read at.
        auto read_loss = [&](int64_t step_done) {
            const ops::LossStats st = pending_loss.take();
            if (!std::isfinite(st.loss_sum)) {
                throw Error("training diverged: the loss is " + std::to_string(st.loss_sum) + " at epoch " +
                            std::to_string(epoch + 1) + ", step " + std::to_string(step_done) + " on rank " +
                            std::to_string(s.rank) + " (lr " + std::to_string(s.schedule->at(epoch)) +
                            "); lower optimizer.lr, add warmup, or check the data normalisation");
            }
            local_sum += st.loss_sum;
            window_loss_sum += st.loss_sum;
        };
        for (int64_t step = first; step < steps_per_epoch; ++step) {
            if (max_steps > 0 && loop.global_step >= max_steps) {
                stopped_by_max_steps = true;
                loop.epoch = epoch;
                loop.step_in_epoch = step;
                break;
            }
            s.gsync->begin_step(loop.global_step);
            const double work_t0 = telemetry::now_seconds();
            double step_samples = 0.0;
            for (int64_t pass = 0; pass < passes; ++pass) {
                std::pair<const Tensor*, const Tensor*> xy;
                {
                    // Data: the next batch, and on a GPU its (asynchronous) copy to the device.
                    PhaseScope p(phases, Phase::Data, s.timeline.get());
                    if (!loader.next(batch)) throw Error("data loader ended early at step " + std::to_string(step));
                    xy = s.on_device(batch);
                }
                const auto [x, y] = xy;
                {
                    PhaseScope p(phases, Phase::Forward, s.timeline.get());
                    const Tensor& logits = s.model->forward(*x, {true, &s.dropout_rng});
                    s.model->loss().forward(logits, *y, pending_loss);
                }
                step_samples += static_cast<double>(batch.size());
                const bool last_pass = pass + 1 == passes;
                PhaseScope p(phases, Phase::Backward, s.timeline.get());
                s.model->loss().backward(*y, loss_scale, dlogits);
                // Only the last pass's gradients are final; only they go to the allreduce (as they become ready).
                if (last_pass && !local_sgd)
                    s.model->backward(dlogits, [&](nn::Parameter& prm) { s.gsync->on_gradient_ready(prm); }, pass > 0);
                else
                    s.model->backward(dlogits, {}, pass > 0);
            }
            if (!local_sgd) {
                if (s.device == Device::CPU) work_log.record(telemetry::now_seconds() - work_t0);
                PhaseScope p(phases, Phase::SyncWait, s.timeline.get());
                s.gsync->synchronize();
            }
            const float lr = s.schedule->at(static_cast<double>(epoch) + static_cast<double>(step) / steps_per_epoch);
            {
                PhaseScope p(phases, Phase::Optimizer, s.timeline.get());
                s.opt->step(lr);
            }
            local_samples += step_samples;
            window_samples += step_samples;
            ++loop.global_step;
            ++steps_this_run;
            if (local_sgd && loop.global_step % local_sgd_period == 0) average_parameters_now();
            ++window_steps;
            const int64_t done = step + 1;
            const bool log_now = done % log_every == 0 || done == steps_per_epoch;
            const bool checkpoint_now = ckpt_every_steps > 0 && loop.global_step % ckpt_every_steps == 0;
            if (s.device == Device::CPU || log_now || checkpoint_now) read_loss(done);
            if (log_now) {
                const double now = telemetry::now_seconds();
                const double sps = window_steps * passes * s.batch * s.world / std::max(now - window_t0, 1e-9);
                // The mean training loss of this rank over the steps since the last logged one.
                const double loss = window_loss_sum / std::max(window_samples, 1.0);
                metrics.write({{"type", "step"}, {"epoch", epoch + 1}, {"step", done}, {"global_step", loop.global_step},
                               {"loss", loss}, {"lr", lr}, {"samples_per_s", sps}});
                progress.step(epoch, epochs, done, steps_per_epoch, loss, sps);
                window_t0 = now;
                window_steps = 0;
                window_loss_sum = window_samples = 0.0;
            }
            if (checkpoint_now) {
                average_parameters_now();
                double sums[2] = {local_sum, local_samples};
                s.comm.allreduce(std::span<double>(sums, 2), comm::ReduceOp::Sum);
                LoopState at{epoch, done, loop.global_step, loss_sum + sums[0], loss_samples + sums[1], {}, {}};
                write_checkpoint(at);
            }
        }
        if (pending_loss.pending()) read_loss(loop.step_in_epoch);  // stopped by max_steps between reads
        double sums[2] = {local_sum, local_samples};
        s.comm.allreduce(std::span<double>(sums, 2), comm::ReduceOp::Sum);
        loss_sum += sums[0];
        loss_samples += sums[1];
        train_seconds += telemetry::now_seconds() - epoch_t0;
        if (stopped_by_max_steps) {
            loop.epoch_loss_sum = loss_sum;
            loop.epoch_samples = loss_samples;
            if (loss_samples > 0) train_loss = loss_sum / loss_samples;
            break;
        }
        train_loss = loss_samples > 0 ? loss_sum / loss_samples : std::nan("");
        evaluate_now();
        json rec = {{"type", "epoch"}, {"epoch", epoch + 1}, {"global_step", loop.global_step},
                    {"train_loss", train_loss}, {"wall_s", telemetry::now_seconds() - t_start}};
        rec.update(last_eval);
        metrics.write(rec);
        std::ostringstream os;
        os.precision(4);
        os << "epoch " << epoch + 1 << "/" << epochs << ": train loss " << train_loss << ", test loss "
           << last_eval["test_loss"].get<double>() << ", test accuracy " << last_eval["test_accuracy"].get<double>();
        progress.line(os.str());
        loop.epoch = epoch + 1;
        loop.step_in_epoch = 0;
        loop.epoch_loss_sum = 0;
        loop.epoch_samples = 0;
        if (ckpt_every_epochs > 0 && (epoch + 1) % ckpt_every_epochs == 0) write_checkpoint(loop);
    }
    progress.finish();
    average_parameters_now();  // local_sgd: the run ends with one model on every rank
    // The final position is always saved, so a run stopped by max_steps resumes where it stopped.
    if (checkpointing && steps_this_run > 0 &&
        (stopped_by_max_steps || ckpt_every_epochs == 0 || epoch % ckpt_every_epochs != 0))
        write_checkpoint(loop);
    if (stopped_by_max_steps && last_eval["test_accuracy"].is_null()) evaluate_now();

    // ---- summary ----
    // Traffic of both communicators: the main one (start-up, metrics, local SGD) and the gradients' own.
    const uint64_t bytes_sent = s.comm.bytes_sent() + s.gsync->communicator().bytes_sent();
    const uint64_t bytes_received = s.comm.bytes_received() + s.gsync->communicator().bytes_received();
    const auto sent = s.comm.allgather(bytes_sent);
    const auto received = s.comm.allgather(bytes_received);
    const auto sync_stats = s.gsync->stats();
    json buckets = json::array();
    for (const auto& b : sync_stats.buckets)
        buckets.push_back({{"bytes", b.bytes}, {"tensors", b.tensors}, {"calls", b.calls},
                           {"mean_ms", b.calls ? 1e3 * b.total_s / b.calls : 0.0}, {"busbw_gbs", b.busbw_gbs(s.world)}});
    // Data parallelism's invariant, checked at the end of every run: identical parameters on every rank.
    const auto hashes = s.comm.allgather(sync::parameter_value_hash(s.model->parameters()));
    // Every rank joins both gathers, whatever its device (an empty log just yields no report).
    const auto work_counts = s.comm.allgather(static_cast<uint64_t>(work_log.seconds().size()));
    const std::vector<float> work_all = s.comm.allgather(work_log.seconds());
    std::vector<std::vector<float>> work_per_rank;
    for (size_t r = 0, off = 0; r < work_counts.size() && off + work_counts[r] <= work_all.size(); off += work_counts[r], ++r)
        work_per_rank.emplace_back(work_all.begin() + static_cast<std::ptrdiff_t>(off),
                                   work_all.begin() + static_cast<std::ptrdiff_t>(off + work_counts[r]));
    const telemetry::StragglerReport stragglers = telemetry::analyse_stragglers(work_per_rank);
    const auto usage = telemetry::current_resource_usage();
    const double wall = telemetry::now_seconds() - t_start;
    json phase_s = json::object();
    for (int p = 0; p < static_cast<int>(Phase::Count); ++p)
        phase_s[telemetry::phase_name(static_cast<Phase>(p))] = phases.get(static_cast<Phase>(p));
    json summary = {
        {"world_size", s.world},
        {"batch_size_per_rank", s.batch},
        {"global_batch_size", s.batch * s.world},
        {"epochs", epochs},
        {"epochs_completed", loop.epoch},
        {"steps", loop.global_step},
        {"steps_this_run", steps_this_run},
        {"stopped_by_max_steps", stopped_by_max_steps},
        {"test_accuracy", last_eval["test_accuracy"]},
        {"test_loss", last_eval["test_loss"]},
        {"train_loss", std::isfinite(train_loss) ? json(train_loss) : json(nullptr)},
        {"wall_s", wall},
        {"train_s", train_seconds},
        {"eval_s", eval_seconds},
        {"samples_per_s", train_seconds > 0 ? steps_this_run * passes * s.batch * s.world / train_seconds : 0.0},
        {"phase_s", phase_s},
        {"bytes_sent", bytes_sent},
        {"bytes_received", bytes_received},
        {"bytes_sent_per_rank", sent},
        {"bytes_received_per_rank", received},
        {"parameter_hash_per_rank", hashes},
        {"parameters_identical", std::all_of(hashes.begin(), hashes.end(), [&](uint64_t h) { return h == hashes[0]; })},
        {"backend", s.comm.backend()},
        {"sync", {{"mode", cfg.string("sync.mode")},
                  {"fusion_bytes", cfg.integer("sync.fusion_bytes")},
                  {"cycle_time_ms", cfg.number("sync.cycle_time_ms")},
                  {"min_bucket_bytes", cfg.integer("sync.min_bucket_bytes")},
                  {"overlap", s.gsync->overlapping()},
                  {"compression", cfg.string("sync.compression")},
                  {"backward_passes_per_step", passes},
                  {"blocked_s", sync_stats.blocked_s},
                  {"gradient_bytes_sent", s.gsync->communicator().bytes_sent()},
                  {"gradient_bytes_received", s.gsync->communicator().bytes_received()},
                  {"collectives", sync_stats.collectives},
                  {"buckets", buckets}}},
        {"stragglers", stragglers_json(stragglers, train_seconds, work_log.dropped(), local_sgd, s.device)},
        {"device", to_string(s.device)},
        {"device_name", s.device_name},
        {"model", s.model->name()},
        {"parameters", s.model->parameter_count()},
        {"optimizer", s.opt->name()},
        {"lr", cfg.number("optimizer.lr")},
        {"lr_peak", s.schedule->peak()},
        {"lr_scaling", cfg.string("optimizer.lr_scaling")},
        {"threads_per_rank", cfg.integer("train.threads")},
        {"cpu_gemm", ops::cpu_gemm_library()},
        {"cpu_s", usage.cpu_user_s + usage.cpu_system_s},
        {"peak_rss_mb", usage.peak_rss_mb},
        {"resumed_from", resumed_from.empty() ? json(nullptr) : json(resumed_from)},
        {"data", s.data.train->description()},
        {"data_prefetch", loader.prefetch_note()},
    };
    if (s.device == Device::CUDA) {
        if (s.gpu_monitor) {
            s.gpu_monitor->stop();
            const telemetry::GpuUsage u = s.gpu_monitor->usage();
            summary["gpu_utilisation"] = {{"available", true},
                                          {"samples", u.samples},
                                          {"mean_gpu_percent", u.mean_gpu_percent},
                                          {"max_gpu_percent", u.max_gpu_percent},
                                          {"mean_memory_percent", u.mean_memory_percent},
                                          {"peak_used_mb", u.peak_used_mb},
                                          {"total_mb", u.total_mb}};
        } else {
            summary["gpu_utilisation"] = {{"available", false}, {"why", s.gpu_monitor_why}};
        }
        const auto g = cuda_allocator_stats();
        summary["gpu_memory"] = {{"peak_mb", g.peak_bytes_in_use / 1048576.0},
                                 {"cached_mb", g.bytes_cached / 1048576.0},
                                 {"device_allocations", g.device_allocations}};
    }
    if (cfg.boolean("train.profile_layers")) {
        json layers = json::array();
        for (const auto& t : s.model->layer_timings())
            layers.push_back({{"layer", t.name}, {"forward_s", t.forward_s}, {"backward_s", t.backward_s}});
        summary["last_step_layer_s"] = layers;
    }
    if (s.is_root()) telemetry::write_json_atomically(s.out_dir + "/summary.json", summary);
    std::string timeline_error;
    if (!s.timeline->write(&timeline_error))
        progress.line("ringtrain: rank " + std::to_string(s.rank) + ": warning: timeline not written: " + timeline_error);
    return summary;
}

json Trainer::evaluate_checkpoint(const std::string& checkpoint) {
    load_checkpoint(checkpoint, s_->model->parameters(), nullptr);
    json r = s_->evaluate();
    r["checkpoint"] = checkpoint;
    r["world_size"] = s_->world;
    return r;
}

}  // namespace ringtrain::train

#include "ringtrain/train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/core/memory.hpp"
#include "ringtrain/ops/cpu_conv.hpp"
#include "ringtrain/ops/threads.hpp"
#include "ringtrain/sync/consistency.hpp"
#include "ringtrain/sync/setup_deadline.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/train/device_choice.hpp"
#include "preflight.hpp"
#include "plan_agreement.hpp"
#include "trainer_parts.hpp"
#include "finished_run.hpp"
#include "training_run.hpp"

namespace ringtrain::train {

using nlohmann::json;

namespace {

comm::WireFormat wire_format(Compression c) {
    switch (c) {
        case Compression::Fp16: return comm::WireFormat::Float16;
        case Compression::Bf16: return comm::WireFormat::BFloat16;
        case Compression::None: break;
    }
    return comm::WireFormat::Float32;
}

}  // namespace

namespace detail {

// Each rank's dropout stream differs (ranks drop different units, as in Horovod/DDP) but is reproducible.
TrainerParts::TrainerParts(const Config& c, comm::Communicator& cm, TrainerUse u)
    : config(c), plan(config.plan()), use(u), comm(cm), rank(cm.rank()), world(cm.size()), init_rng(plan.train.seed),
      dropout_rng(rank_dropout_seed(plan.train.seed, cm.rank())) {
    if (world > 1)  // its thread runs only where a limit is set
        stall_watchdog = std::make_unique<sync::StallWatchdog>(
            sync::StallInspector(comm, plan.sync.stall_warning_s, plan.sync.stall_abort_s));
}

void TrainerParts::build_locally() {
    ops::set_intra_op_threads(plan.train.threads);
    ops::set_cpu_conv(plan.train.cpu_conv);
    ops::set_cpu_precision(plan.train.cpu_precision);
    device = pick_device(plan.device);
    // NCCL compresses on the GPU (GradientSync's device path); a CPU model on nccl has no 16-bit path.
    if (plan.sync.backend == Backend::Nccl && plan.sync.compression != Compression::None && device != Device::CUDA)
        throw InputError(std::string("sync.compression: ") + to_string(plan.sync.compression) +
                         " with sync.backend nccl needs the model on a GPU (device: cuda); use none, or the ring or "
                         "mpi backend");
    // On a GPU the host only queues the step's work, so it cannot time a rank's share of it.
    if (plan.sync.balance != Balance::Off && device == Device::CUDA && use == TrainerUse::Train)
        throw InputError(std::string("sync.balance: ") + to_string(plan.sync.balance) +
                         " times each rank's work on the host, which only queues a GPU's; set it to off, or run on "
                         "the CPU (device: cpu)");
    check_image_input(plan, config.model_path());
    check_data_paths(plan.data);
    data = make_datasets(plan, rank, world, /*check_training_files=*/use == TrainerUse::Train);
    train_loader = loader_options(plan, data::LoaderMode::Train, rank, world, device);
    eval_loader = loader_options(plan, data::LoaderMode::Eval, rank, world, device);
    preflight(*this);  // output folder, both splits against the model, memory: before anything is built or written
    model = std::make_unique<nn::Model>(nn::Model::from_file(config.model_path(), data.train->sample_shape(), init_rng));
    const auto out = model->output_shape();
    const bool bce = model->loss().type() == "sigmoid_bce";
    const int64_t want_outputs = bce ? 1 : data.train->num_classes();
    if (out.size() != 1 || out[0] != want_outputs)
        throw InputError(config.model_path() + ": the model ends in shape " + shape_string(out) + " but the data set has " +
                         std::to_string(data.train->num_classes()) + " classes; the last layer needs " +
                         std::to_string(want_outputs) + " outputs");
    model->set_profile(plan.train.profile_layers);
    if (device == Device::CUDA) {
        // One GPU per rank: local rank modulo the visible GPUs (Slurm's --gpus-per-task shows each task one).
        select_cuda_device(comm.local_rank());
        ops::open_device_libraries(Device::CUDA);
        device_name = cuda_device_description();
        gpu_monitor = telemetry::GpuMonitor::open(cuda_pci_bus_id(), &gpu_monitor_why);
        model->to(Device::CUDA);
        uploader = std::make_unique<AsyncUploader>();
        // Training batches filled in page-locked memory go to the GPU without a host copy (AsyncUploader); the loader
        // waits for a batch's copy before refilling its buffer. RINGTRAIN_STAGED_UPLOAD=1 copies each batch into a
        // staging buffer instead, as before (to measure both: bench/RESULTS.md, "The batch's hand-over to the GPU").
        // Evaluation batches stay staged: each evaluation makes a new loader, which would page-lock and free its
        // buffers every time (a device-wide synchronisation each), for a pass that runs once an epoch.
        const char* staged = std::getenv("RINGTRAIN_STAGED_UPLOAD");
        batches_in_place = staged == nullptr || std::string(staged) != "1";
        if (batches_in_place) {
            AsyncUploader* up = uploader.get();
            train_loader.allocate_host = [up](Shape shape) { return up->host_tensor(std::move(shape)); };
            train_loader.before_refill = [up] { up->wait_for_host_reads(); };
        }
    }
    use_synchronised_batchnorm();
    build_optimizer();
    facts = facts_to_agree(plan, config.model_path(), data, *model, /*contents=*/world > 1);
}

void TrainerParts::agree_across_ranks() { sync::require_same_facts(comm, facts); }

// sync.batchnorm: every batchnorm layer sums its batch statistics over the ranks, through the main communicator (why
// that one: sync/batch_stats_reducer.hpp). A model without batchnorm has nothing to synchronise: not an error.
void TrainerParts::use_synchronised_batchnorm() {
    if (!plan.sync.batchnorm || model->set_batch_stats_reducer(nullptr) == 0) return;
    if (plan.sync.mode == SyncMode::LocalSgd)
        throw InputError("sync.batchnorm: true needs sync.mode allreduce; with local_sgd each rank steps on its own "
                         "between averages, and synchronised statistics would put collectives back into every "
                         "forward and backward pass; set sync.batchnorm to false or sync.mode to allreduce");
    if (world == 1) return;  // one rank's batch is the whole batch: plain BatchNorm computes the same
    batch_stats = std::make_unique<sync::CommBatchStatsReducer>(comm, stall_watchdog.get());
    model->set_batch_stats_reducer(batch_stats.get());
}

void TrainerParts::build_optimizer() {
    const OptimizerPlan& o = plan.optimizer;
    optim::OptimizerOptions oo;
    oo.name = to_string(o.name);
    oo.momentum = static_cast<float>(o.momentum);
    oo.nesterov = o.nesterov;
    oo.weight_decay = static_cast<float>(o.weight_decay);
    oo.beta1 = static_cast<float>(o.beta1);
    oo.beta2 = static_cast<float>(o.beta2);
    oo.rho = static_cast<float>(o.rho);
    oo.eps = static_cast<float>(o.resolved_eps());
    opt = optim::make_optimizer(oo, model->parameters());

    schedule = std::make_unique<optim::LrSchedule>(schedule_options(plan), world);
}

void TrainerParts::build_collectively() {
    settle_bad_files(data, plan, comm);  // before any loader numbers the samples
    // Every rank has built the same model (agree_across_ranks): all start from rank 0's values.
    sync::broadcast_from_root(comm, model->parameters(), opt->state());
    timeline = std::make_unique<telemetry::Timeline>(plan.output.timeline, rank, !plan.output.timeline.empty());
    sync::SyncOptions so;
    so.fusion_bytes = static_cast<size_t>(plan.sync.fusion_bytes);
    so.overlap = plan.sync.overlap;
    so.cycle_time_ms = plan.sync.cycle_time_ms;
    so.min_bucket_bytes = static_cast<size_t>(plan.sync.min_bucket_bytes);
    so.wire = wire_format(plan.sync.compression);
    so.stall_warning_s = plan.sync.stall_warning_s;
    so.stall_abort_s = plan.sync.stall_abort_s;
    // Gradients travel on a communicator of their own, used only by GradientSync's communication thread.
    gsync = std::make_unique<sync::GradientSync>(comm::make_communicator(comm.backend()), model->parameters(), so,
                                                 timeline.get());
    averager = std::make_unique<sync::ParameterAverager>(comm, model->parameters(), so.fusion_bytes);
    buffer_averager = std::make_unique<sync::ParameterAverager>(comm, model->buffers(), so.fusion_bytes);
    if (timeline->enabled()) {
        telemetry::Timeline* tl = timeline.get();
        model->set_layer_observer([tl](const std::string& layer, bool backward, double a, double b) {
            const int64_t end = tl->now_us();
            tl->add((backward ? "backward " : "forward ") + layer, "layer", end - static_cast<int64_t>((b - a) * 1e6),
                    static_cast<int64_t>((b - a) * 1e6));
        });
    }
}

std::pair<const Tensor*, const Tensor*> TrainerParts::on_device(const data::Batch& b) {
    if (device == Device::CPU) return {&b.x, &b.y};
    const Tensor* host[2] = {&b.x, &b.y};
    const auto dev = uploader->upload(host);
    return {&dev[0], &dev[1]};
}

sync::StallWatchdog::Watch TrainerParts::watch(const char* what, size_t bytes, int64_t step) {
    return sync::StallWatchdog::Watch(stall_watchdog.get(), what, bytes, step);
}

json TrainerParts::evaluate(int64_t step) {
    data::ShardedLoader loader(*data.test, eval_loader);
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
    {
        const auto w = watch("the evaluation's allreduce", sizeof sums, step);  // where a rank stuck in its share shows
        comm.allreduce(std::span<double>(sums, 3), comm::ReduceOp::Sum);
    }
    const double n = std::max(sums[2], 1.0);
    return {{"test_loss", sums[0] / n}, {"test_accuracy", sums[1] / n}, {"test_samples", static_cast<int64_t>(std::llround(sums[2]))}};
}

}  // namespace detail

Trainer::Trainer(const Config& config, comm::Communicator& comm, TrainerUse use)
    : parts_(std::make_unique<detail::TrainerParts>(config, comm, use)) {
    // A rank stuck in set-up (say, reading a data file that never ends) must not hold the others forever.
    sync::SetupDeadline deadline(comm, parts_->plan.sync.setup_timeout_s);
    deadline.enter("reading its data and building the model");
    sync::run_then_agree(comm, [&] {
        parts_->build_locally();
        deadline.enter("waiting for the other ranks to read their data and build the model");
    });
    deadline.enter("comparing its run with the other ranks'");
    parts_->agree_across_ranks();
    deadline.enter("copying rank 0's parameters and making the gradient communicator");
    parts_->build_collectively();
    deadline.disarm();
}

Trainer::~Trainer() = default;

void Trainer::set_process_exits_after_train(bool yes) {
    parts_->after_stop = yes ? AfterStop::KeepHandlers : AfterStop::RestoreHandlers;
}

void Trainer::set_step_callback(std::function<void(int64_t)> callback) { step_callback_ = std::move(callback); }

uint64_t Trainer::parameter_hash() const { return sync::parameter_value_hash(parts_->model->parameters()); }

std::vector<float> Trainer::parameters_flat() const {
    std::vector<float> v;
    for (auto* p : parts_->model->parameters()) {
        const Tensor host = p->value.device() == Device::CPU ? p->value : p->value.to(Device::CPU);  // a GPU model's too
        v.insert(v.end(), host.data(), host.data() + host.numel());
    }
    return v;
}

json Trainer::train() {
    try {
        return train_loop();
    } catch (const std::exception& e) {
        write_timeline_after_failure(e.what());
        throw;
    }
}

// A run that fails still leaves its timeline: the spans up to the failure are what a user opens to see why (Horovod's
// timeline, written as the run goes, survives a crash too). The failure is the last event, named by its message.
void Trainer::write_timeline_after_failure(const std::string& what) const noexcept {
    try {
        telemetry::Timeline& tl = *parts_->timeline;
        if (!tl.enabled()) return;
        tl.add("failed", "error", tl.now_us(), 0, {{"error", what}});
        std::string why;
        if (!tl.write(&why)) {  // written silently otherwise: the failure's own line stays the one to read
            std::fprintf(stderr, "ringtrain: rank %d: warning: timeline not written: %s\n", parts_->rank, why.c_str());
            std::fflush(stderr);
        }
    } catch (...) {  // the failure being reported matters more than its timeline
    }
}

// The loop, after llm.c's train_gpt2.c: a step is one call, the occasional work around it sits in plain ifs.
json Trainer::train_loop() {
    const RunPlan& plan = parts_->plan;
    detail::TrainingRun run(*parts_);
    run.resume();
    if (run.resumed() && detail::nothing_left(run.position(), plan.train))
        if (auto kept = detail::keep_finished_run_summary(parts_->comm, plan, run.position(),
                                                          [&run] {
                                                              run.end_of_votes();  // nothing votes any more
                                                              return run.evaluate_final_model();
                                                          }))
            return *kept;
    if (parts_->gpu_monitor) parts_->gpu_monitor->start(0.1);
    const LoopState& pos = run.position();
    while (pos.epoch < plan.train.epochs && !run.stopped_by_max_steps() && !run.stopped_by_signal()) {
        run.begin_epoch();
        while (pos.step_in_epoch < run.steps_per_epoch() && !run.stop_at_max_steps() && !run.stopped_by_signal()) {
            const float lr = run.run_step();  // ends with the ranks' agreement on a stop signal
            const bool regular_line = pos.step_in_epoch % plan.train.log_every_steps == 0 ||
                                      pos.step_in_epoch == run.steps_per_epoch();
            // A stopped run (a signal, or max_steps) logs its last step too, so metrics.jsonl ends where the run and
            // its checkpoint do. That line does not restart the window, so a resumed run's next line covers the same
            // steps as an uninterrupted run's.
            const bool last_step = run.stopped_by_signal() ||
                                   (plan.train.max_steps > 0 && pos.global_step >= plan.train.max_steps);
            const bool log_now = regular_line || last_step;
            const bool checkpoint_now =
                plan.checkpoint.every_steps > 0 && pos.global_step % plan.checkpoint.every_steps == 0;
            // The step's losses stay on the device until the host needs them: every step on the CPU (free
            // there), at log steps, checkpoints and the epoch's end on a GPU, so the host can queue the next
            // step meanwhile. A non-finite loss is found at that read, and the error names the step it was read at.
            if (parts_->device == Device::CPU || log_now || checkpoint_now) run.read_loss();
            if (log_now) run.log_step(lr, /*restart_window=*/regular_line);
            if (checkpoint_now) run.write_step_checkpoint();
            if (step_callback_) step_callback_(pos.global_step);
        }
        run.end_epoch();
    }
    run.end_of_votes();
    run.finish();
    return run.write_summary();
}

// Each rank read its own --checkpoint: one that names another file (or another copy that differs) would make the
// figures a mix of two models. The loaded values are compared, not the paths (one file, reached by other paths on
// other hosts, is the same checkpoint); the paths only name them in the message. Collective; exit 2 on every rank.
void Trainer::require_same_checkpoint_values(const std::string& checkpoint) {
    comm::Communicator& comm = parts_->comm;
    const uint64_t mine = sync::parameter_value_hash(parts_->model->checkpoint_tensors());
    const std::vector<uint64_t> all = comm.allgather(mine);
    if (std::all_of(all.begin(), all.end(), [&](uint64_t h) { return h == all[0]; })) return;
    const std::vector<std::string> paths = comm::allgather_strings(comm, checkpoint);
    std::string which;
    for (size_t r = 0; r < all.size(); ++r)
        which += (r ? ", rank " : "rank ") + std::to_string(r) + " read " + paths[r] + " (values " + hex16(all[r]) + ")";
    throw CollectiveInputError("eval: the ranks loaded different models from --checkpoint: " + which +
                               "; pass every rank the same checkpoint");
}

json Trainer::evaluate_checkpoint(const std::string& given) {
    // Every rank reads the checkpoint; one that cannot (missing, damaged, another model's) fails the job through
    // one agreement, so every rank leaves with exit 2 and its line instead of an MPI_Abort.
    LoopState at;
    std::string checkpoint = given;
    {
        // A read that never returns must not hold the other ranks for ever (sync.setup_timeout_s).
        sync::SetupDeadline deadline(parts_->comm, parts_->plan.sync.setup_timeout_s);
        deadline.enter("reading the checkpoint " + checkpoint);
        sync::run_then_agree(parts_->comm, [&] {
            checkpoint = load_checkpoint_to_evaluate(given, [&](const std::string& path) {  // a folder: its newest
                at = load_checkpoint(path, parts_->model->checkpoint_tensors(), nullptr);
            });
            check_checkpoint_classes(checkpoint, at.extra, parts_->data.train->class_names());
            deadline.enter("waiting for the other ranks to read their checkpoint");
        });
    }
    require_same_checkpoint_values(checkpoint);
    json r = parts_->evaluate(at.global_step);
    r["checkpoint"] = checkpoint;
    r["world_size"] = parts_->world;
    return r;
}

}  // namespace ringtrain::train

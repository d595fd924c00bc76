// summary.json: what one train() call did, written by rank 0 at the end. The sections are built by the functions
// below from values gathered once from every rank; TrainingRun::write_summary lists the top-level fields.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "ringtrain/data/image_folder.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/ops/cpu_conv.hpp"
#include "ringtrain/ops/threads.hpp"
#include "ringtrain/sync/consistency.hpp"
#include "ringtrain/telemetry/resources.hpp"
#include "ringtrain/train/stalled_learning.hpp"
#include "training_run.hpp"

namespace ringtrain::train::detail {

using nlohmann::json;
using telemetry::Phase;

namespace {

// One rank's totals, gathered from every rank in a single collective.
struct RankTotals {
    uint64_t bytes_sent, bytes_received;  // both communicators: the main one (start-up, metrics, local SGD) and
                                          // the gradients' own
    uint64_t parameter_hash;              // data parallelism's invariant: the same on every rank at the end
    uint64_t work_steps;                  // entries in this rank's StepWorkLog
};

template <class F>
std::vector<uint64_t> per_rank(const std::vector<RankTotals>& all, F field) {
    std::vector<uint64_t> v;
    for (const RankTotals& t : all) v.push_back(t.*field);
    return v;
}

// "stragglers": how much of the run the ranks waited for the slowest one's local work.
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
            {"wait_caused_s_per_rank", r.wait_caused_s_per_rank},
            {"mean_work_ms_per_rank", r.mean_work_ms_per_rank}};
}

// "sync": the plan's synchronisation settings and what GradientSync measured.
// "balance": sync.balance and, when it ran, what the exchanges saw and decided (every rank's, from rank 0).
json balance_json(const SyncPlan& plan, const sync::BatchBalancer* balancer) {
    json j = {{"mode", to_string(plan.balance)}};
    if (!balancer) return j;
    const sync::BalanceStats& s = balancer->stats();
    j["exchanges"] = s.exchanges;
    j["samples_per_rank"] = s.samples;
    j["batch_min_per_rank"] = s.batch_min;
    j["batch_max_per_rank"] = s.batch_max;
    j["batch_last_per_rank"] = balancer->counts();
    return j;
}

json sync_json(const SyncPlan& plan, const sync::GradientSync& gsync, int world, const sync::BatchBalancer* balancer) {
    const auto stats = gsync.stats();
    json buckets = json::array();
    // A 16-bit wire carries half the float32 bytes: the bandwidth achieved is of those (nccl-tests counts the bytes
    // the collective moves), not of the float32 gradient.
    const double wire = plan.compression == Compression::None ? 1.0 : 0.5;
    for (const auto& b : stats.buckets)
        buckets.push_back({{"bytes", b.bytes}, {"wire_bytes", static_cast<uint64_t>(static_cast<double>(b.bytes) * wire)},
                           {"tensors", b.tensors}, {"calls", b.calls},
                           {"mean_ms", b.calls ? 1e3 * b.total_s / b.calls : 0.0},
                           {"busbw_gbs", b.busbw_gbs(world) * wire}});
    return {{"mode", to_string(plan.mode)},
            {"fusion_bytes", plan.fusion_bytes},
            {"cycle_time_ms", plan.cycle_time_ms},
            {"min_bucket_bytes", plan.min_bucket_bytes},
            {"overlap", gsync.overlapping()},
            {"compression", to_string(plan.compression)},
            {"backward_passes_per_step", plan.backward_passes_per_step},
            {"batchnorm", plan.batchnorm},
            {"balance", balance_json(plan, balancer)},
            {"blocked_s", stats.blocked_s},
            {"gradient_bytes_sent", gsync.communicator().bytes_sent()},
            {"gradient_bytes_received", gsync.communicator().bytes_received()},
            {"collectives", stats.collectives},
            {"buckets", buckets}};
}


// "gpu_utilisation" (NVML samples while training) and "gpu_memory" (the caching allocator), CUDA runs only.
void add_gpu_sections(json& summary, telemetry::GpuMonitor* monitor, const std::string& monitor_why) {
    if (monitor) {
        monitor->stop();
        const telemetry::GpuUsage u = monitor->usage();
        summary["gpu_utilisation"] = {{"available", true},
                                      {"samples", u.samples},
                                      {"mean_gpu_percent", u.mean_gpu_percent},
                                      {"max_gpu_percent", u.max_gpu_percent},
                                      {"mean_memory_percent", u.mean_memory_percent},
                                      {"peak_used_mb", u.peak_used_mb},
                                      {"total_mb", u.total_mb}};
    } else {
        summary["gpu_utilisation"] = {{"available", false}, {"why", monitor_why}};
    }
    const auto g = cuda_allocator_stats();
    summary["gpu_memory"] = {{"peak_mb", g.peak_bytes_in_use / 1048576.0},
                             {"cached_mb", g.bytes_cached / 1048576.0},
                             {"device_allocations", g.device_allocations}};
}

json layer_seconds_json(const nn::Model& model) {
    json layers = json::array();
    for (const auto& t : model.layer_timings())
        layers.push_back({{"layer", t.name}, {"forward_s", t.forward_s}, {"backward_s", t.backward_s}});
    return layers;
}

}  // namespace

// Where the batches came from and how they reached the device: the upload path (GPU), the image folder's class
// names, skipped files and decoded-image cache.
void TrainingRun::add_data_fields(json& summary) const {
    const TrainerParts& p = parts_;
    // How the batches reached the GPU: tensors copied from the loader's page-locked buffers, and through the staging
    // buffer (evaluation batches; all of them with RINGTRAIN_STAGED_UPLOAD=1 or where page-locking failed).
    if (p.uploader)
        summary["batch_upload"] = {{"mode", p.batches_in_place ? "in place" : "staged"},
                                   {"in_place_tensors", p.uploader->direct_copies()},
                                   {"staged_tensors", p.uploader->staged_copies()}};
    // image_folder: the label of each class name (null for data without names), and the files data.skip_bad_files
    // left out on every rank.
    const auto classes = p.data.train->class_names();
    summary["classes"] = classes.empty() ? json(nullptr) : json(classes);
    if (plan_.data.skip_bad_files && plan_.data.format == DataFormat::ImageFolder) summary["skipped_files"] = p.data.skipped;
    if (plan_.data.cache && plan_.data.format == DataFormat::ImageFolder) {
        double held = 0;  // this rank's decoded-image cache, both splits
        for (const data::Dataset* split : {p.data.train.get(), p.data.test.get()})
            if (const auto* folder = dynamic_cast<const data::ImageFolderDataset*>(split)) held += double(folder->cache_bytes());
        summary["data_cache_mb"] = held / 1048576.0;
    }
}

// A model at chance, and the learning rate the world-size rule gave it (train/stalled_learning.hpp); null otherwise.
json TrainingRun::learning_stalled_json() const {
    if (!last_eval_.contains("test_accuracy") || !last_eval_["test_accuracy"].is_number()) return nullptr;
    const TrainerParts& p = parts_;
    LearningFacts f;
    f.binary_logistic = p.model->loss().type() == "sigmoid_bce";
    f.classes = f.binary_logistic ? 2 : p.data.train->num_classes();
    f.test_accuracy = last_eval_["test_accuracy"].get<double>();
    f.train_loss = train_loss_;
    f.lr = plan_.optimizer.lr;
    f.lr_peak = p.schedule->peak();
    f.lr_scaling = to_string(plan_.optimizer.lr_scaling);
    f.world_size = p.world;
    f.warmup_epochs = plan_.optimizer.warmup_epochs;
    f.steps = pos_.global_step;
    const std::optional<std::string> note = stalled_learning_note(f);
    return note ? json(*note) : json(nullptr);
}

// The run's own prediction (`predicted`) at several ranks: local SGD's from its periods, allreduce's from its buckets.
// Collective.
void TrainingRun::add_prediction(json& summary) {
    TrainerParts& p = parts_;
    if (p.world > 1 && local_sgd_ && p.device == Device::CPU) {  // collective: every rank's work per period
        uint64_t floats = 0;
        for (const nn::Parameter* prm : p.model->parameters()) floats += static_cast<uint64_t>(prm->value.numel());
        const double averages = static_cast<double>(std::max<int64_t>(averages_, 1));
        summary["predicted"] = local_sgd_predicted_section(
            p.comm, plan_,
            {phases_, phases_after_first_step_, steps_this_run_, step_clock_.steady_step_s(), plan_.train.batch_size,
             floats, static_cast<double>(p.averager->collectives()) / averages, period_work_log_, false,
             latency_probe_s_});
    } else if (p.world > 1) {  // collective: every rank's bucket times
        summary["predicted"] = predicted_section(p.comm, *p.gsync, p.model->parameters(), plan_, p.device,
                                                 {phases_, phases_after_first_step_, step_clock_, work_log_, steps_this_run_,
                                                  latency_probe_s_});
    }
}

json TrainingRun::gather_summary() {
    TrainerParts& p = parts_;
    // Its gathers and the prediction's probes are collectives; the rest is milliseconds of arithmetic.
    const auto w = p.watch("the end-of-run summary's collectives", 0, pos_.global_step);
    const RankTotals mine{p.comm.bytes_sent() + p.gsync->communicator().bytes_sent(),
                          p.comm.bytes_received() + p.gsync->communicator().bytes_received(),
                          sync::parameter_value_hash(p.model->parameters()),
                          static_cast<uint64_t>(work_log_.seconds().size())};
    const std::vector<RankTotals> all = p.comm.allgather_object(mine);
    const auto hashes = per_rank(all, &RankTotals::parameter_hash);
    const telemetry::StragglerReport stragglers =
        gather_stragglers(p.comm, work_log_, per_rank(all, &RankTotals::work_steps));
    const auto usage = telemetry::current_resource_usage();
    const int64_t batch = plan_.train.batch_size;
    json summary = {
        {"world_size", p.world},
        {"batch_size_per_rank", batch},
        {"global_batch_size", batch * p.world},
        {"epochs", plan_.train.epochs},
        {"epochs_completed", pos_.epoch},
        {"steps", pos_.global_step},
        {"steps_this_run", steps_this_run_},
        {"steps_per_epoch", steps_per_epoch_},
        {"stopped_by_max_steps", stopped_by_max_steps_},
        // null unless a stop signal ended the run early (exit 3, a checkpoint at that step)
        {"stopped", stopped_by_signal() ? json("signal " + signal_name(stop_signal_) + " at step " +
                                               std::to_string(pos_.global_step))
                                        : json(nullptr)},
        {"test_accuracy", last_eval_["test_accuracy"]},
        {"test_loss", last_eval_["test_loss"]},
        {"train_loss", std::isfinite(train_loss_) ? json(train_loss_) : json(nullptr)},
        {"wall_s", telemetry::now_seconds() - t_start_},
        {"train_s", train_seconds_},
        // The mean step after the first (whose set-up a short run would spread over every step): what predictions,
        // which are of a step in a warm run, are measured against. CPU only: on a GPU the step's clock stops when the
        // host has queued the work (the device is waited for at log and checkpoint steps), so it would read low.
        {"steady_step_s", p.device == Device::CPU && step_clock_.steady_step_s() > 0 ? json(step_clock_.steady_step_s())
                                                                                     : json(nullptr)},
        {"eval_s", eval_seconds_},
        {"checkpoint_s", checkpoint_seconds_},
        {"samples_per_s",
         train_seconds_ > 0 ? steps_this_run_ * passes_ * batch * p.world / train_seconds_ : 0.0},
        {"phase_s", phase_seconds_json(phases_)},
        {"bytes_sent", mine.bytes_sent},
        {"bytes_received", mine.bytes_received},
        {"bytes_sent_per_rank", per_rank(all, &RankTotals::bytes_sent)},
        {"bytes_received_per_rank", per_rank(all, &RankTotals::bytes_received)},
        {"parameter_hash_per_rank", hashes},
        {"parameters_identical", std::all_of(hashes.begin(), hashes.end(), [&](uint64_t h) { return h == hashes[0]; })},
        {"backend", p.comm.backend()},
        {"sync", sync_json(plan_.sync, *p.gsync, p.world, balancer_.get())},
        {"stragglers", stragglers_json(stragglers, train_seconds_, work_log_.dropped(), local_sgd_, p.device)},
        {"device", to_string(p.device)},
        {"device_name", p.device_name},
        {"model", p.model->name()},
        {"model_file", p.config.model_path()},  // the file the name resolved to (docs/run-output.md, "Paths")
        {"parameters", p.model->parameter_count()},
        {"optimizer", p.opt->name()},
        {"lr", plan_.optimizer.lr},
        {"lr_peak", p.schedule->peak()},
        {"lr_scaling", to_string(plan_.optimizer.lr_scaling)},
        {"threads_per_rank", plan_.train.threads},
        {"cpu_gemm", ops::cpu_gemm_library()},
        {"cpu_conv", ops::cpu_conv_description()},
        {"cpu_precision", to_string(plan_.train.cpu_precision)},
        {"cpu_s", usage.cpu_user_s + usage.cpu_system_s},
        {"peak_rss_mb", usage.peak_rss_mb},
        {"resumed_from", resumed_from_.empty() ? json(nullptr) : json(resumed_from_)},
        {"data", p.data.train->description()},
        {"data_prefetch", loader_.prefetch_note()},
        // The part of phase_s.data spent waiting for the loader; the rest is handing the batch on (on a GPU, queueing
        // its copy, and staging it into pinned memory where the batch is not page-locked).
        {"data_loader_wait_s", loader_.wait_seconds()},
    };
    add_data_fields(summary);
    summary["learning_stalled"] = learning_stalled_json();
    add_prediction(summary);  // collective
    if (p.device == Device::CUDA) add_gpu_sections(summary, p.gpu_monitor.get(), p.gpu_monitor_why);
    if (plan_.train.profile_layers) summary["last_step_layer_s"] = layer_seconds_json(*p.model);
    return summary;
}

json TrainingRun::write_summary() {
    const json summary = gather_summary();  // collective, watched
    // The write is rank 0's own: watched under its own name, so that a hung file system ends the job naming it, not
    // the collectives and the other ranks.
    TrainerParts& p = parts_;
    if (p.is_root()) {
        const auto w = p.watch("rank 0's write of output.dir/summary.json", 0, pos_.global_step);
        telemetry::write_json_atomically(plan_.output.dir + "/summary.json", summary);
    }
    std::string timeline_error;
    if (!p.timeline->write(&timeline_error)) {
        // Every rank writes its own file: each says when it could not, whatever output.progress is (preflight checked
        // the folder; this is a disk that filled or a folder removed during the run).
        std::fprintf(stderr, "ringtrain: rank %d: warning: timeline not written: %s\n", p.rank, timeline_error.c_str());
        std::fflush(stderr);
    }
    return summary;
}

json phase_seconds_json(const telemetry::PhaseTimes& phases) {
    json j = json::object();
    for (int p = 0; p < static_cast<int>(Phase::Count); ++p)
        j[telemetry::phase_name(static_cast<Phase>(p))] = phases.get(static_cast<Phase>(p));
    return j;
}

}  // namespace ringtrain::train::detail

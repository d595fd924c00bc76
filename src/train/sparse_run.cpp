#include "sparse_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "add_seconds.hpp"
#include "plan_agreement.hpp"
#include "preflight.hpp"
#include "run_measurements.hpp"
#include "ringtrain/comm/mpi_communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"
#include "ringtrain/nn/click_metrics.hpp"
#include "ringtrain/sync/setup_deadline.hpp"
#include "ringtrain/telemetry/epoch_scalars.hpp"
#include "ringtrain/telemetry/resources.hpp"

namespace ringtrain::train::detail {

using nlohmann::json;
using telemetry::Phase;
using telemetry::ScopedPhase;
namespace fs = std::filesystem;

namespace {

// With peer parsing, reading this rank's rows waits for any piece another rank claimed to parse: a frozen or stuck
// helper would hold the reader there, outside every collective, so the stall watchdog watches those waits too (a
// batch parses in milliseconds).
constexpr const char* kPeerPiecesWait = "the wait for pieces of this rank's rows that another rank claimed to parse";

data::SparseReaderOptions reader_options(const RunPlan& plan, const std::string& file, int rank, int world) {
    const DataPlan& d = plan.data;
    data::SparseReaderOptions o;
    o.format = d.format == DataFormat::Criteo ? data::SparseFormat::Criteo : data::SparseFormat::Libsvm;
    o.file = file;
    o.index_base = d.index_base;
    o.num_features = d.num_features;
    o.hash_bits = d.hash_bits;
    o.criteo_integers = d.criteo_integers == CriteoIntegerTransform::Hash ? data::CriteoIntegers::Hash
                                                                         : data::CriteoIntegers::Log2;
    o.shuffle_buffer = d.shuffle_buffer;
    o.cache = d.cache;
    o.seed = plan.train.seed;
    o.rank = rank;
    o.world = world;
    return o;
}

sync::SparseSyncMethod sync_method(SparseSync s) {
    switch (s) {
        case SparseSync::Allgather: return sync::SparseSyncMethod::Allgather;
        case SparseSync::Dense: return sync::SparseSyncMethod::Dense;
        case SparseSync::Auto: break;
    }
    return sync::SparseSyncMethod::Auto;
}

sync::SparseUpdate sparse_update(SparseUpdate u) {
    return u == SparseUpdate::Owner ? sync::SparseUpdate::Owner : sync::SparseUpdate::Replicated;
}

// Labels against the model: 0/1 for one output, a class index below K for K outputs (the readers cannot know K).
void check_labels(const CsrBatch& b, int64_t k, const std::string& file) {
    for (float y : b.labels) {
        const bool ok = k == 1 ? (y == 0.0f || y == 1.0f) : (y >= 0.0f && y < static_cast<float>(k) && y == std::floor(y));
        if (!ok)
            throw InputError(file + ": label " + std::to_string(y) + " does not fit a model with out_features " +
                             std::to_string(k) + (k == 1 ? " (binary labels: 0/1 or -1/+1)" : " (labels 0.." +
                                                                                                   std::to_string(k - 1) + ")"));
    }
}

void fill_labels(const CsrBatch& b, Tensor& labels) {
    const auto n = static_cast<int64_t>(b.labels.size());
    if (labels.numel() != n) labels = Tensor(Shape{n});
    std::copy(b.labels.begin(), b.labels.end(), labels.data());
}

// What a checkpoint's steps_per_epoch must satisfy (global = epoch x it + step_in_epoch, step_in_epoch <= it) when
// the count is not known yet: only inside the first epoch, where global = step_in_epoch.
int64_t recorded_steps_per_epoch(int64_t known, const LoopState& at) {
    return known > 0 ? known : std::max<int64_t>(1, at.step_in_epoch);
}

// What fixes which rows each rank reads at each step (resume replays an epoch's order by counting batches): the
// checkpoint records them, and resuming across a change would land somewhere else in the data, silently.
json stream_settings(const RunPlan& plan, const std::string& train_fingerprint) {
    return {{"train.batch_size", plan.train.batch_size},
            {"data.shuffle_buffer", plan.data.shuffle_buffer},
            {"train.seed", plan.train.seed},
            {"data.train_file", train_fingerprint}};
}

// The table, its optimizer state and (unless sync.sparse is allgather) the dense sync buffer, each num_features x
// out_features floats, as one preflight part naming the key that sizes the table.
MemoryPart sparse_table_memory(const RunPlan& plan, int64_t num_features, int64_t out_features, int world,
                               const std::string& model_path) {
    double copies = 1.0;  // the values (the gradient is sparse: only the rows a batch touched)
    if (plan.optimizer.name == OptimizerName::Adagrad) copies += 1.0;  // the squared-gradient sums
    if (plan.optimizer.name == OptimizerName::Ftrl) copies += 2.0;     // z and n
    // The dense allreduce buffer: gradients combined every step, other than by allgather alone (local SGD averages
    // the table in place).
    if (world > 1 && plan.sync.mode == SyncMode::Allreduce && plan.sync.sparse != SparseSync::Allgather) copies += 1.0;
    const bool criteo = plan.data.format == DataFormat::Criteo;
    return {.what = std::to_string(num_features) + " features x out_features " + std::to_string(out_features) +
                    " floats, " + std::to_string(static_cast<int>(copies)) +
                    " copies (the table, its optimizer state, the dense sync buffer)",
            .key = criteo ? "data.hash_bits" : "data.num_features",
            .hint = "lower it, or the out_features of " + model_path,
            .bytes = 4.0 * double(num_features) * double(out_features) * copies};
}

// The loop position rank 0 found, sent to every rank as one struct.
struct ResumePoint {
    int64_t epoch, step_in_epoch, global_step, steps_per_epoch, last_average_step;
    double epoch_loss_sum, epoch_samples;
    int64_t resumed, rank_copies;  // 0 or 1, full words: no padding bytes
    int64_t window_steps;          // the steps since the stopped run's last logged line, and their sums
    double window_loss, window_rows;
};

// One rank's totals for the summary, gathered once.
struct RankTotals {
    uint64_t bytes_sent, bytes_received, parameter_hash;
    uint64_t sync_bytes_allgather, sync_bytes_dense;
    double parse_in_waits_s;
    int64_t rows_from_peers, rows_for_peers;
    double seconds_for_peers;
};

}  // namespace

SparseRun::SparseRun(const Config& config, comm::Communicator& comm)
    : config_(config),
      plan_(config_.plan()),
      comm_(comm),
      rank_(comm.rank()),
      world_(comm.size()),
      t_start_(telemetry::now_seconds()) {
    // A rank stuck in set-up (a training file on a hung file system, a FIFO nobody writes) must not hold the others
    // forever: the same deadline as the dense path's (Trainer).
    sync::SetupDeadline deadline(comm_, plan_.sync.setup_timeout_s);
    deadline.enter("reading its share of the training file");
    int64_t max_index = -1;
    sync::run_then_agree(comm_, [&] {
        check_data_paths(plan_.data);  // led by the key: the CLI names the config file that gave it
        max_index = scan_share_for_feature_count();
        deadline.enter("waiting for the other ranks to read their shares of the training file");
    });
    // Unconditional (one number): a rank whose config differs must still issue the same collectives until the
    // agreement below names the difference.
    double widest = static_cast<double>(max_index);
    comm_.allreduce(std::span<double>(&widest, 1), comm::ReduceOp::Max);
    deadline.enter("mapping the peer-parsing board shared with its host's ranks");
    open_peer_board();
    deadline.enter("reading its data and building the model");
    sync::Facts mine;
    sync::run_then_agree(comm_, [&] {
        build_locally(static_cast<int64_t>(widest));
        mine = facts();
        deadline.enter("waiting for the other ranks to read their data and build the model");
    });
    deadline.enter("comparing its run with the other ranks'");
    sync::require_same_facts(comm_, mine);
    deadline.enter("copying rank 0's parameters");
    broadcast_from_root();
    gsync_ = std::make_unique<sync::SparseGradientSync>(comm_, model_->num_features(), model_->out_features(),
                                                        sync_method(plan_.sync.sparse),
                                                        sparse_update(plan_.sync.sparse_update));
    // Counted by the memory check; now, not mid-run. Local SGD never exchanges gradients: no buffer.
    if (plan_.sync.mode == SyncMode::Allreduce) gsync_->allocate_dense_buffer(bias_grad_.size());
    if (world_ > 1)  // its thread runs only where a limit is set
        stall_watchdog_ = std::make_unique<sync::StallWatchdog>(
            sync::StallInspector(comm_, plan_.sync.stall_warning_s, plan_.sync.stall_abort_s));
    // While it waits in the step's gathers for a slower rank, a rank that parses on its training thread parses its
    // next rows instead of spinning, so the per-step jitter of parsing and compute costs the lockstep less.
    // Only then: a non-blocking collective costs more than a blocking one where both ranks arrive together (Open
    // MPI's libnbc), which with nothing to do in the wait is all cost.
    if (train_reader_->parses_on_caller()) {
        idle_ = [this] { return parse_ahead_while_waiting(); };
        gsync_->set_idle_work(idle_);
    }
    deadline.disarm();
}

void SparseRun::open_peer_board() {
    // Every rank decides alike (an environment that differs between ranks must not split the collective below).
    const char* env = std::getenv("RINGTRAIN_PEER_PARSING");
    const bool off_by_env = env && (std::string(env) == "0" || std::string(env) == "off" || std::string(env) == "false");
    double on = world_ > 1 && !off_by_env ? 1.0 : 0.0;
    comm_.allreduce(std::span<double>(&on, 1), comm::ReduceOp::Min);
    auto* mpi = dynamic_cast<comm::MpiCommunicatorBase*>(&comm_);
    if (on == 0 || !mpi) {
        peer_parsing_off_ = world_ == 1 ? "one rank"
                            : on == 0   ? "RINGTRAIN_PEER_PARSING=0 on some rank"
                                        : "the " + comm_.backend() + " backend has no MPI communicator";
        return;
    }
    std::string why;
    peer_segment_ = comm::SharedSegment::create_on_host(mpi->mpi_comm(), data::sparse_peer_board_bytes(comm_.local_size()),
                                                        &why);
    if (!peer_segment_) {
        peer_parsing_off_ = "no shared memory: " + why;
    } else if (peer_segment_->size() == 1) {
        peer_parsing_off_ = "no other rank on this host";
        peer_segment_.reset();
    } else {
        peer_board_ = std::make_unique<data::SparsePeerBoard>(peer_segment_->base(), peer_segment_->bytes(),
                                                              peer_segment_->size(), peer_segment_->rank());
    }
}

// libsvm with data.num_features 0: the largest index in this rank's share (the ranks' maximum is the whole file's,
// each rank reading 1/N of it); -1 otherwise.
int64_t SparseRun::scan_share_for_feature_count() const {
    if (plan_.data.format != DataFormat::Libsvm || plan_.data.num_features != 0) return -1;
    return data::scan_sparse_share(reader_options(plan_, plan_.data.train_file, rank_, world_)).max_index;
}

void SparseRun::build_locally(int64_t max_index) {
    model_path_ = config_.model_path();
    model_file_ = read_sparse_model_file(model_path_);
    // Labels are checked by the readers against the model's classes (binary: 0/1 after -1 -> 0), naming file:line.
    const int64_t classes = std::max<int64_t>(2, model_file_.out_features);
    data::SparseReaderOptions train = reader_options(plan_, plan_.data.train_file, rank_, world_);
    train.num_classes = classes;
    if (plan_.data.format == DataFormat::Libsvm && plan_.data.num_features == 0)
        train.num_features = data::sparse_num_features_for(max_index);
    train.peer_board = peer_board_.get();
    train_reader_ = data::open_sparse_reader(train);
    if (peer_board_ && !train_reader_->parses_with_peers())
        peer_parsing_off_ = train_reader_->parses_on_caller() ? "a .gz file (every rank decompresses the whole stream)"
                                                             : "a parse thread (the rank may use more than one CPU)";
    train_fingerprint_ = file_fingerprint(plan_.data.train_file);
    // Before the table is allocated: a feature space too large for this host is bad input (exit 2) naming the key,
    // not a std::bad_alloc (exit 1) now or when the dense sync buffer is first needed.
    check_memory_on_host({sparse_table_memory(plan_, train_reader_->num_features(), model_file_.out_features,
                                              world_, model_path_)},
                         comm_.local_size());
    // The test file is read in the training file's feature space. It is parsed once here, before any output
    // exists, so a bad line in it (an index past that space included) is an error naming file:line at start-up,
    // not after the first epoch; the training file is too large for that and is checked as it streams.
    data::SparseReaderOptions test = reader_options(plan_, plan_.data.test_file, rank_, world_);
    test.num_features = train_reader_->num_features();
    test.num_classes = classes;
    test.shuffle_buffer = 0;
    if (data::scan_sparse_share(test).rows == 0) {
        // An empty test file evaluated to accuracy 0 and log loss 0, reported as a result. A share can be empty
        // on its own (a file of fewer rows than ranks), so the whole file decides.
        data::SparseReaderOptions whole = test;
        whole.rank = 0;
        whole.world = 1;
        if (data::scan_sparse_share(whole).rows == 0)
            throw InputError(plan_.data.test_file + ": data.test_file holds no rows (empty, or only comments and "
                             "empty lines); name a file with test rows");
    }
    test_reader_ = data::open_sparse_reader(test);
    model_ = std::make_unique<nn::SparseLinear>(model_file_.name, train_reader_->num_features(),
                                                model_file_.out_features);
    const OptimizerPlan& o = plan_.optimizer;
    optim::SparseOptimizerOptions so;
    so.name = to_string(o.name);
    so.initial_accumulator = static_cast<float>(o.initial_accumulator);
    so.eps = static_cast<float>(o.resolved_eps());
    so.beta = static_cast<float>(o.beta);
    so.l1 = static_cast<float>(o.l1);
    so.l2 = static_cast<float>(o.l2);
    opt_ = optim::make_sparse_optimizer(so, model_->weight(), model_->bias());
    loss_ = nn::make_loss(model_file_.loss);
    schedule_ = std::make_unique<optim::LrSchedule>(schedule_options(plan_), world_);
    bias_grad_.assign(static_cast<size_t>(model_->out_features()), 0.0f);
}

sync::Facts SparseRun::facts() const {
    std::vector<nn::Parameter*> tensors = model_->parameters();
    return sparse_facts_to_agree(plan_, model_path_, model_->num_features(), tensors, opt_->name());
}

// ---- resume ----

void SparseRun::resume() {
    // A read that never returns (a hung file system) must not hold the other ranks for ever (sync.setup_timeout_s).
    sync::SetupDeadline deadline(comm_, plan_.sync.setup_timeout_s);
    deadline.enter(rank_ == 0 ? "reading the checkpoint to resume from" : "waiting for rank 0 to read the checkpoint");
    sync::run_then_agree(comm_, [&] {
        if (rank_ == 0) load_resume_checkpoint();
    });
    deadline.enter("receiving rank 0's position and tensors");
    adopt_root_position();
}

// Rank 0 only (inside resume's agreement). A fresh run never overwrites a previous run's metrics or checkpoints.
void SparseRun::load_resume_checkpoint() {
    check_output_dir(plan_.output.dir);  // a folder, or creatable, and writable: exit 2 naming output.dir
    output_lock_ = OutputFolderLock(plan_.output.dir);  // before reading checkpoints another run may write
    const std::string dir = plan_.output.checkpoint_dir();
    const std::string metrics = plan_.output.dir + "/metrics.jsonl";
    const ResumeFrom& from = plan_.checkpoint.resume;
    if (from.kind == ResumeFrom::Fresh && holds_previous_run(plan_.output.dir, dir))
        throw InputError("output.dir " + plan_.output.dir + " holds a previous run; use checkpoint.resume=auto to "
                         "continue it or choose another output.dir");
    const auto load = [this](const std::string& path) { load_checkpoint_for_this_run(path); };
    if (from.kind == ResumeFrom::Path) load(from.path);
    // The newest that verifies, or InputError when none does: the dense path's rule (checkpoint.cpp), so a run
    // never starts over in a folder holding its earlier metrics.
    if (from.kind == ResumeFrom::Latest) resume_newest(dir, load);
    fs::create_directories(dir);
    check_latest_pointer(dir);
    remove_stale_temporaries(dir);
    if (resumed_) {
        report_set_aside(dir, set_aside_checkpoints_after(dir, pos_.global_step, resumed_from_), pos_.global_step);
        keep_metrics_up_to(metrics, pos_.epoch, pos_.global_step);
    }
    metrics_ = telemetry::MetricsWriter(metrics, resumed_);
    // A resumed run adds a file of its own; its steps continue the earlier files' (global steps).
    if (plan_.output.tensorboard) tensorboard_ = telemetry::TensorBoardWriter(plan_.output.tensorboard_dir());
    // The steps after the checkpoint are trained again: hide what a run killed after it wrote of them.
    if (resumed_) tensorboard_.restart_at(pos_.global_step + 1);
}

// Loads `path` (rank 0) and checks it fits this run: the world size, the batch size, the shuffle buffer, the seed
// and the training file fix which rows each rank reads at each step, and resume replays an epoch by counting
// batches, so a change would put the run elsewhere in the data without a word.
void SparseRun::load_checkpoint_for_this_run(const std::string& path) {
    RankCopies copies;
    LoopState at = load_checkpoint(path, model_->parameters(), opt_.get(), &copies);
    const auto refuse = [&](const std::string& key, const std::string& then, const std::string& now) {
        throw InputError(path + ": written with " + key + " " + then + ", this run has " + now +
                         "; resuming would read other rows than the checkpoint's run: resume with the settings that "
                         "wrote it, or start a fresh run in another output.dir");
    };
    if (at.world_size != world_) refuse("world size", std::to_string(at.world_size) + " (mpirun -np)", std::to_string(world_));
    const json sparse = at.extra.value("sparse", json::object());
    const json now = stream_settings(plan_, train_fingerprint_);
    for (const auto& [key, value] : now.items())
        if (sparse.contains("stream") && sparse["stream"].contains(key) && sparse["stream"][key] != value)
            refuse(key, sparse["stream"][key].dump(), value.dump());
    steps_per_epoch_ = sparse.value("steps_per_epoch", int64_t{0});
    // Every rank's own table, bias and optimizer state, where this run keeps them per rank too (a checkpoint without
    // them, or a run that switched to allreduce, continues from the checkpoint's model and rank 0's state).
    last_average_step_ = at.global_step;  // the checkpoint's tensors are one model on every rank
    resumed_copies_ = {};
    if (keeps_rank_copies() && copies.cover(0, own_tensors().size())) {
        last_average_step_ = recorded_last_average_step(path, at);
        resumed_copies_ = std::move(copies);
    }
    pos_ = std::move(at);
    resumed_ = true;
    resumed_from_ = path;
}

void SparseRun::adopt_root_position() {
    ResumePoint p{.epoch = pos_.epoch,
                  .step_in_epoch = pos_.step_in_epoch,
                  .global_step = pos_.global_step,
                  .steps_per_epoch = steps_per_epoch_,
                  .last_average_step = last_average_step_,
                  .epoch_loss_sum = pos_.epoch_loss_sum,
                  .epoch_samples = pos_.epoch_samples,
                  .resumed = resumed_ ? 1 : 0,
                  .rank_copies = resumed_copies_.empty() ? 0 : 1,
                  .window_steps = 0,
                  .window_loss = 0,
                  .window_rows = 0};
    if (resumed_ && rank_ == 0) {
        const LogWindow w = recorded_log_window(pos_);  // the rows logged, summed over the ranks
        p.window_steps = w.steps;
        p.window_loss = w.loss_sum;
        p.window_rows = w.samples;
    }
    comm_.broadcast_object(p, 0);
    pos_.epoch = p.epoch;
    pos_.step_in_epoch = p.step_in_epoch;
    pos_.global_step = p.global_step;
    pos_.epoch_loss_sum = p.epoch_loss_sum;
    pos_.epoch_samples = p.epoch_samples;
    pos_.world_size = world_;
    steps_per_epoch_ = p.steps_per_epoch;
    resumed_ = p.resumed != 0;
    skip_batches_ = pos_.step_in_epoch;
    last_average_step_ = p.last_average_step;
    window_steps_ = p.window_steps;
    window_loss_ = p.window_loss;
    window_rows_ = p.window_rows;
    broadcast_from_root();
    if (p.rank_copies != 0) {
        // Local SGD: each rank continues from its own tensors, as in an uninterrupted run.
        const auto w = watch("the resume's sending of every rank's own tensors", 0);
        sync::scatter_from_root(comm_, resumed_copies_.values, own_tensors());
    }
    resumed_copies_ = {};
}

void SparseRun::broadcast_from_root() {
    std::vector<std::pair<std::string, Tensor*>> state = opt_->state();
    sync::broadcast_from_root(comm_, model_->parameters(), state);
    int64_t steps = opt_->steps_taken();
    comm_.broadcast_object(steps, 0);
    opt_->set_steps_taken(steps);
}

std::vector<Tensor*> SparseRun::own_tensors() {
    std::vector<Tensor*> t;
    for (nn::Parameter* p : model_->parameters()) t.push_back(&p->value);
    for (auto& [name, state] : opt_->state()) t.push_back(state);
    return t;
}

std::vector<std::span<float>> SparseRun::all_values() {
    std::vector<std::span<float>> v;
    for (nn::Parameter* p : model_->parameters()) v.push_back(p->value.span());
    for (auto& [name, t] : opt_->state()) v.push_back(t->span());
    return v;
}

// ---- the loop ----

bool SparseRun::stopped_by_max_steps() const {
    return plan_.train.max_steps > 0 && pos_.global_step >= plan_.train.max_steps;
}

bool SparseRun::epochs_left() const {
    return pos_.epoch < plan_.train.epochs && !stopped_by_max_steps() && !stopped_by_signal();
}

float SparseRun::learning_rate() const { return schedule_->at(static_cast<double>(pos_.epoch)); }

void SparseRun::begin_epoch() {
    // A training file that changed under the run (rewritten, truncated, appended to) gave epochs of other or fewer
    // rows without a word, and checkpoints that no longer fit it; every rank sees the same file, so each says so.
    if (const std::string now = file_fingerprint(plan_.data.train_file); now != train_fingerprint_)
        throw InputError(plan_.data.train_file + ": data.train_file changed during the run (at its start " +
                         train_fingerprint_ + ", now " + now + "); restore it, or start a fresh run on the new file");
    epoch_t0_ = window_t0_ = stretch_start_ = telemetry::now_seconds();
    ScopedPhase t(phases_, Phase::Data);
    {
        const auto w = watch(peer_board_ ? kPeerPiecesWait : nullptr, 0);  // the pass's slots, once helpers let go
        train_reader_->start_epoch(pos_.epoch);
    }
    // Resuming inside an epoch: the reader replays the epoch's order (the same seed, rank and epoch), so skipping
    // the batches already trained on puts every rank where the checkpoint left it.
    for (; skip_batches_ > 0; --skip_batches_)
        if (!train_reader_->next(batch_, plan_.train.batch_size))
            throw InputError(plan_.data.train_file + ": holds fewer rows than when the checkpoint was written; "
                             "resume with the file the run started with");
}

bool SparseRun::parse_ahead_while_waiting() {
    constexpr int64_t kBatchesAhead = 2;
    const double t0 = telemetry::now_seconds();
    // Our own rows first, then a peer's: a short wait (jitter) is best spent on rows this rank needs anyway, with no
    // hand-over; a rank whose bank is full keeps waiting for as long as the other is slower, and that time goes to
    // the slower rank's rows.
    const bool did = train_reader_->parse_ahead(kBatchesAhead * plan_.train.batch_size) || train_reader_->help_peers();
    if (did) parsed_while_waiting_s_ += telemetry::now_seconds() - t0;
    return did;
}

// The rows parsed inside a wait are input time, not waiting (phase_s and the prediction's terms).
void SparseRun::book_parse_ahead() {
    parse_in_waits_s_ += parsed_while_waiting_s_;
    phases_.add(Phase::Data, parsed_while_waiting_s_);
    phases_.add(Phase::SyncWait, -parsed_while_waiting_s_);
    parsed_while_waiting_s_ = 0;
}

void SparseRun::reduce_pending_loss(bool have_batch, int64_t* ranks_with_batch, int64_t* ranks_stopping) {
    // The stop vote rides here for free: this allreduce runs before every step anyway.
    const bool stop_vote = stop_ != nullptr && stop_->requested();
    double v[4] = {have_batch ? 1.0 : 0.0, pending_loss_, pending_rows_, stop_vote ? 1.0 : 0.0};
    // With owner updates pending (identically on every rank) the sums ride in the share of the updated rows.
    if (rows_pending_) {
        share_updated_rows(std::span<double>(v, 4));
    } else {
        {
            ScopedPhase t(phases_, Phase::SyncWait);  // the wait for the slowest rank's update and parse, as the share's
            const auto w = watch("the step's opening allreduce", sizeof v);
            comm_.allreduce_while(std::span<double>(v, 4), comm::ReduceOp::Sum, idle_);
        }
        book_parse_ahead();
    }
    pending_loss_ = pending_rows_ = 0;
    if (!std::isfinite(v[1]))
        throw CollectiveError("training loss is not finite at global step " + std::to_string(pos_.global_step) +
                              "; lower optimizer.lr");
    window_loss_ += v[1];
    window_rows_ += v[2];
    pos_.epoch_loss_sum += v[1];
    pos_.epoch_samples += v[2];
    samples_ += v[2];
    if (ranks_with_batch) *ranks_with_batch = static_cast<int64_t>(v[0]);
    if (ranks_stopping) *ranks_stopping = static_cast<int64_t>(v[3]);
}

bool SparseRun::next_batch() {
    if (stopped_by_max_steps() || stopped_by_signal()) return false;
    bool have = false;
    {
        ScopedPhase t(phases_, Phase::Data);
        const auto w = watch(peer_board_ ? kPeerPiecesWait : nullptr, 0);
        have = train_reader_->next(batch_, plan_.train.batch_size);
    }
    int64_t ranks_with_batch = 0, ranks_stopping = 0;
    pending_opening_work_ = telemetry::now_seconds() - stretch_start_ - averaging_in_stretch_s_;
    averaging_in_stretch_s_ = 0;
    const double parsed_before = parse_in_waits_s_;
    reduce_pending_loss(have, &ranks_with_batch, &ranks_stopping);
    opening_end_ = telemetry::now_seconds();
    // The rows parsed ahead while waiting here count with the stretch before it (see run_step).
    pending_opening_work_ += parse_in_waits_s_ - parsed_before;
    // Local SGD: the opening allreduce is the step's only wait for every rank, so the next stretch starts here.
    if (plan_.sync.mode == SyncMode::LocalSgd) stretch_start_ = opening_end_;
    // The batch just read is not trained on when the loop stops: resuming replays the epoch's order up to the
    // checkpoint's step, so it is read again then.
    if (ranks_stopping > 0 && may_stop_now()) {
        // Agreed where the last epoch's data ran out: the run ends here anyway, its end evaluating as every epoch's
        // does, so it finishes as usual (exit 0) rather than stopping (the dense path's rule, TrainingRun).
        const bool run_ends = ranks_with_batch < world_ && pos_.step_in_epoch > 0 && pos_.epoch + 1 >= plan_.train.epochs;
        if (run_ends)
            stop_->votes_over(/*agreed_at_last_step=*/true);
        else
            agree_on_stop();
    }
    if (ranks_with_batch == world_) return !stopped_by_signal();
    // Some rank's share ran out: the epoch ends on every rank (a batch read by the others is not trained on).
    if (pos_.step_in_epoch == 0)
        throw CollectiveInputError(plan_.data.train_file + (world_ == 1 ? std::string(": holds no rows; name a file "
                                                                                  "with training rows")
                                                                    : ": a rank's share of the file holds no rows; "
                                                                      "use a larger file or fewer ranks"));
    steps_per_epoch_ = pos_.step_in_epoch;
    return false;
}

// Local SGD stops only where the ranks just averaged (a stop waits up to local_sgd_period steps; the vote is cast
// again before each step until then). The rule predates checkpoints with every rank's own tensors, which resume
// exactly from any step; it is kept so that a stop behaves as it always has.
bool SparseRun::may_stop_now() const {
    return plan_.sync.mode != SyncMode::LocalSgd || world_ == 1 || pos_.global_step % plan_.sync.local_sgd_period == 0;
}

void SparseRun::agree_on_stop() {
    // agreed() after agreed_signal's collective: the watchdog covers it (see TrainingRun::agree_on_stop).
    stop_signal_ = agreed_signal(comm_, *stop_);  // once per run, for the summary
    stop_->agreed();
    // metrics.jsonl (and TensorBoard) end where the checkpoint is: the stopped step, its loss now reduced. The
    // window goes on (the checkpoint records it), so a resumed run's next line is an uninterrupted run's.
    if (window_steps_ > 0) log_step(learning_rate(), /*restart_window=*/false);
}

float SparseRun::run_step() {
    if (steps_run_ == 1) phases_after_first_step_ = phases_;
    const float lr = learning_rate();
    const int64_t rows = batch_.rows();
    check_labels(batch_, model_->out_features(), plan_.data.train_file);
    fill_labels(batch_, labels_);
    ops::LossStats stats;
    {
        ScopedPhase t(phases_, Phase::Forward);
        model_->forward(batch_, logits_);
        stats = loss_->forward(logits_, labels_);
    }
    {
        ScopedPhase t(phases_, Phase::Backward);
        // Each rank's mean; the ranks' average of equal batches is then the mean over the global batch.
        loss_->backward(labels_, rows > 0 ? 1.0f / static_cast<float>(rows) : 0.0f, dlogits_);
        model_->backward(batch_, dlogits_.data(), grad_, bias_grad_);
    }
    const bool local_sgd = plan_.sync.mode == SyncMode::LocalSgd;
    // Every rank runs the same steps, so the logs line up step for step across ranks. Each entry is the stretch of
    // local work before a wait plus the rows parsed ahead inside that wait: they are this rank's work as much as
    // the stretch's (they shorten its next one), and without them the ranks' stretches would differ by who parsed
    // early rather than by how long anyone waited.
    work_before_opening_.record(pending_opening_work_);
    if (!local_sgd) {
        const double before_exchange = telemetry::now_seconds() - opening_end_;
        {
            ScopedPhase t(phases_, Phase::SyncWait);
            const auto w = watch("the sparse gradient exchange",
                                 grad_.rows.size() * sizeof(uint32_t) + grad_.values.size() * sizeof(float));
            gsync_->average(grad_, bias_grad_);
        }
        stretch_start_ = telemetry::now_seconds();
        work_before_exchange_.record(before_exchange + parsed_while_waiting_s_);
    }
    book_parse_ahead();
    {
        ScopedPhase t(phases_, Phase::Optimizer);
        opt_->apply(grad_, bias_grad_, lr);
    }
    if (!local_sgd && gsync_->owned_rows_only()) {
        // Owner updates: the rows this rank updated go to the others in the next opening allreduce's collective
        // (reduce_pending_loss), which comes before anything reads the table again: the next forward, a checkpoint,
        // the evaluation, the summary.
        ScopedPhase t(phases_, Phase::Optimizer);
        opt_->export_rows(grad_.rows, updated_rows_);
        rows_pending_ = true;
    }
    pending_loss_ += stats.loss_sum;
    pending_rows_ += static_cast<double>(rows);
    ++pos_.step_in_epoch;
    ++pos_.global_step;
    ++steps_run_;
    ++window_steps_;
    if (local_sgd && pos_.global_step % plan_.sync.local_sgd_period == 0) average_all_tensors();
    return lr;
}

// Owner updates: this rank updated only the rows it owns; each owner's rows (weight and per-row optimizer state)
// go to every other rank, which writes them in, so the table and the state are the same bits on every rank again.
// `sums` are the opening allreduce's numbers, summed over the ranks in the same collective.
void SparseRun::share_updated_rows(std::span<double> sums) {
    {
        ScopedPhase t(phases_, Phase::SyncWait);
        const auto w = watch("the exchange of updated rows",
                             updated_rows_.rows.size() * sizeof(uint32_t) + updated_rows_.values.size() * sizeof(float));
        gsync_->share_updated_rows(updated_rows_, sums);
    }
    book_parse_ahead();
    rows_pending_ = false;
    ScopedPhase t(phases_, Phase::Optimizer);
    opt_->import_rows(updated_rows_);
}

// Local SGD: the table, the bias and the optimizer state averaged over the ranks (FTRL's weights are a function
// of its state, so averaging the weights alone would be undone by the next update: they are recomputed).
void SparseRun::average_all_tensors() {
    if (world_ == 1 || last_average_step_ == pos_.global_step) return;  // already one model: averaging is a no-op
    const double t0 = telemetry::now_seconds();
    {
        ScopedPhase t(phases_, Phase::SyncWait);
        size_t bytes = 0;
        for (std::span<float> values : all_values()) bytes += values.size_bytes();
        const auto w = watch("the local SGD parameter average", bytes);
        for (std::span<float> values : all_values()) comm_.allreduce(values, comm::ReduceOp::Average);
    }
    averaging_in_stretch_s_ += telemetry::now_seconds() - t0;
    ScopedPhase t(phases_, Phase::Optimizer);
    opt_->recompute_weights(learning_rate());  // FTRL: the weights of the averaged z and n
    ++local_sgd_averages_;
    last_average_step_ = pos_.global_step;
}

sync::StallWatchdog::Watch SparseRun::watch(const char* what, size_t bytes) {
    return sync::StallWatchdog::Watch(stall_watchdog_.get(), what, bytes, pos_.global_step);
}

bool SparseRun::log_now() const { return pos_.global_step % plan_.train.log_every_steps == 0; }

bool SparseRun::checkpoint_now() const {
    return plan_.checkpoint.every_steps > 0 && pos_.global_step % plan_.checkpoint.every_steps == 0;
}

void SparseRun::log_step(float lr, bool restart_window) {
    const double now = telemetry::now_seconds();
    const double sps = window_rows_ / std::max(now - window_t0_, 1e-9);
    const json loss = window_rows_ > 0 ? json(window_loss_ / window_rows_) : json(nullptr);
    metrics_.write({{"type", "step"}, {"epoch", pos_.epoch + 1}, {"step", pos_.step_in_epoch},
                    {"global_step", pos_.global_step}, {"loss", loss}, {"lr", lr}, {"samples_per_s", sps}});
    // steps_per_epoch_ is 0 until the first pass over the file has counted them: the line then shows no total.
    progress_.step(pos_.epoch, plan_.train.epochs, pos_.step_in_epoch, steps_per_epoch_,
                   loss.is_number() ? loss.get<double>() : std::nan(""), sps);
    if (tensorboard_.enabled()) {
        std::vector<telemetry::Scalar> v = {{"train/lr", lr}, {"train/samples_per_s", sps}};
        if (loss.is_number()) v.insert(v.begin(), {"train/loss", loss.get<double>()});
        tensorboard_.scalars(pos_.global_step, v);
    }
    if (!restart_window) return;
    window_loss_ = window_rows_ = 0;
    window_steps_ = 0;
    window_t0_ = now;
}

LoopState SparseRun::checkpoint_position() {
    reduce_pending_loss(false, nullptr);  // the sums up to this step, on every rank
    LoopState at = pos_;
    at.world_size = world_;
    at.steps_per_epoch = recorded_steps_per_epoch(steps_per_epoch_, at);
    // The format keeps one RNG state per rank (the dense path's dropout); the sparse path draws no random numbers.
    at.rng_states.assign(static_cast<size_t>(world_), Rng(plan_.train.seed).state());
    at.extra = {{"sparse", {{"num_features", model_->num_features()},
                            {"out_features", model_->out_features()},
                            {"steps_per_epoch", steps_per_epoch_},
                            {"format", to_string(plan_.data.format)},
                            {"stream", stream_settings(plan_, train_fingerprint_)}}},
                {"config", config_.document()}};
    record_log_window(at, {window_steps_, window_loss_, window_rows_});  // the resumed run's next line: the same steps
    return at;
}

bool SparseRun::keeps_rank_copies() const { return plan_.sync.mode == SyncMode::LocalSgd && world_ > 1; }

void SparseRun::write_checkpoint(const LoopState& at) {
    AddSeconds timed(checkpoint_seconds_);
    // Collectives, before rank 0 alone writes. Local SGD with several ranks: the ranks' average as the model, made
    // aside (averaging in place here would change the rest of the run), and every rank's own tensors.
    AveragedTensors averaged;
    RankCopies copies;
    if (keeps_rank_copies()) {
        averaged = averaged_tensors();
        const auto w = watch("the checkpoint's gathering of every rank's tensors", 0);
        copies = {world_, sync::gather_to_root(comm_, own_tensors())};
    }
    if (rank_ != 0) return;
    LoopState full = at;
    std::vector<nn::Parameter*> model = model_->parameters();
    if (keeps_rank_copies()) {
        record_last_average_step(full, last_average_step_);
        for (size_t i = 0; i < model.size(); ++i) model[i] = &averaged.model[i];
    }
    const std::string name = checkpoint_file_name(at.global_step);
    save_checkpoint(plan_.output.checkpoint_dir() + "/" + name, model, opt_.get(), full, copies,
                    keeps_rank_copies() ? &averaged.state : nullptr);
    publish_checkpoint(plan_.output.checkpoint_dir(), name, plan_.checkpoint.keep);
}

// Local SGD with several ranks: the table, bias and optimizer state a checkpoint holds, what the ranks' average would
// make here (average_all_tensors: FTRL's weights from the averaged state), made aside. The state goes with the model
// so that a run resumed with sync.mode allreduce starts from one consistent average (FTRL's weights follow from its
// z and n: the averaged weights beside rank 0's own state would disagree at every row it had touched). Right after an
// average the ranks hold all of it already: copied as it is. Collective.
SparseRun::AveragedTensors SparseRun::averaged_tensors() {
    AveragedTensors avg;
    std::vector<nn::Parameter>& model = avg.model;
    std::vector<Tensor>& state = avg.state;
    for (const nn::Parameter* p : model_->parameters()) model.push_back({p->name, p->value.clone(), Tensor()});
    for (const auto& [name, t] : opt_->state()) state.push_back(t->clone());
    if (last_average_step_ == pos_.global_step) return avg;
    size_t bytes = 0;
    for (const nn::Parameter& p : model) bytes += static_cast<size_t>(p.value.numel()) * sizeof(float);
    for (const Tensor& t : state) bytes += static_cast<size_t>(t.numel()) * sizeof(float);
    const auto w = watch("the checkpoint's average of the ranks' models", bytes);
    for (nn::Parameter& p : model) comm_.allreduce(p.value.span(), comm::ReduceOp::Average);
    for (Tensor& t : state) comm_.allreduce(t.span(), comm::ReduceOp::Average);
    opt_->weights_for_state(state, learning_rate(), model[0].value, model[1].value);
    return avg;
}

void SparseRun::write_step_checkpoint() {
    const double t0 = telemetry::now_seconds();
    write_checkpoint(checkpoint_position());
    if (world_ > 1) {
        // Every rank waits here for rank 0's write, not in the next step's collectives (their wait is communication).
        AddSeconds timed(checkpoint_seconds_);
        const auto w = watch("the barrier after a step checkpoint", 0);
        comm_.barrier();
    }
    // Training time, the step lines' rows/s and the stretch of local work the prediction measures leave it out.
    const double spent = telemetry::now_seconds() - t0;
    epoch_t0_ += spent;
    window_t0_ += spent;
    stretch_start_ += spent;
}

void SparseRun::end_epoch() {
    reduce_pending_loss(false, nullptr);
    // A max_steps stop logs its last step, as a signal stop does (agree_on_stop), without restarting the window, so
    // metrics.jsonl ends where the run does and a resumed run's lines are still an uninterrupted run's.
    if (stopped_by_max_steps() && !stopped_by_signal() && !log_now() && window_steps_ > 0)
        log_step(learning_rate(), /*restart_window=*/false);
    train_seconds_ += telemetry::now_seconds() - epoch_t0_;
    if (pos_.epoch_samples > 0) train_loss_ = pos_.epoch_loss_sum / pos_.epoch_samples;
    if ((stopped_by_max_steps() || stopped_by_signal()) && pos_.step_in_epoch != steps_per_epoch_)
        return;  // stays inside the epoch, for the final checkpoint
    // Local SGD: the epoch's test figures are those of the one model the ranks average to, as on the dense path
    // (each rank scoring its share with its own drifted model would report a mixture; a no-op right after an average).
    if (plan_.sync.mode == SyncMode::LocalSgd) average_all_tensors();
    last_eval_ = evaluate();
    last_eval_step_ = pos_.global_step;
    json rec = {{"type", "epoch"}, {"epoch", pos_.epoch + 1}, {"global_step", pos_.global_step},
                {"train_loss", train_loss_}, {"wall_s", telemetry::now_seconds() - t_start_}};
    rec.update(last_eval_);
    metrics_.write(rec);
    if (tensorboard_.enabled()) tensorboard_.scalars(pos_.global_step, epoch_scalars());
    char text[256], auc[64] = "undefined (one class in the test set)";
    if (last_eval_["test_auc"].is_number()) std::snprintf(auc, sizeof auc, "%.4f", last_eval_["test_auc"].get<double>());
    std::snprintf(text, sizeof text, "epoch %lld/%lld: train loss %.4f, test log loss %.4f, test AUC %s, test accuracy %.4f",
                  static_cast<long long>(pos_.epoch + 1), static_cast<long long>(plan_.train.epochs), train_loss_,
                  last_eval_["test_logloss"].get<double>(), auc, last_eval_["test_accuracy"].get<double>());
    progress_.line(text);
    ++pos_.epoch;
    pos_.step_in_epoch = 0;
    pos_.epoch_loss_sum = pos_.epoch_samples = 0;
    if (plan_.checkpoint.every_epochs > 0 && pos_.epoch % plan_.checkpoint.every_epochs == 0)
        write_checkpoint(checkpoint_position());
}

std::vector<telemetry::Scalar> SparseRun::epoch_scalars() const {
    std::vector<telemetry::Scalar> v = telemetry::epoch_scalars(train_loss_, last_eval_, phases_, train_seconds_);
    v.push_back({"comm/bytes_sent", static_cast<double>(comm_.bytes_sent())});
    v.push_back({"comm/bytes_received", static_cast<double>(comm_.bytes_received())});
    // This rank's gradient bytes each way the sparse sync can take (sync.sparse auto picks per step).
    const sync::SparseSyncStats& st = gsync_->stats();
    v.push_back({"sync/bytes_allgather", static_cast<double>(st.bytes_allgather)});
    v.push_back({"sync/bytes_dense", static_cast<double>(st.bytes_dense)});
    return v;
}

void SparseRun::finish() {
    progress_.finish();
    const bool stopped = stopped_by_signal();
    // The run's last position is saved when checkpoints are on and the last write was elsewhere; after a stop
    // signal, checkpoints off included (what the stop is for). Saved before the final average below: local SGD's
    // checkpoint holds each rank's own tensors as they are at this step in an uninterrupted run.
    if ((plan_.checkpoint.enabled() && steps_run_ > 0) || stopped) {
        const std::string last = plan_.output.checkpoint_dir() + "/" + checkpoint_file_name(pos_.global_step);
        int32_t have = rank_ == 0 && fs::exists(last) ? 1 : 0;
        {
            const auto w = watch("the last checkpoint's check", sizeof have);
            comm_.broadcast_object(have, 0);
        }
        if (!have) write_checkpoint(checkpoint_position());
    }
    if (plan_.sync.mode == SyncMode::LocalSgd) average_all_tensors();  // the run ends with one model on every rank
    // The final model's test figures, also after a max_steps stop past an earlier epoch's evaluation.
    if (last_eval_step_ != pos_.global_step && !stopped) {
        last_eval_ = evaluate();
        last_eval_step_ = pos_.global_step;
    }
}

// ---- evaluation ----

json SparseRun::evaluate() {
    const int64_t k = model_->out_features();
    std::vector<float> scored;  // (score, label) per row, for the AUC
    double sums[3] = {0, 0, 0};  // loss, correct, rows
    test_reader_->start_epoch(0);
    while (test_reader_->next(batch_, plan_.train.eval_batch_size)) {
        check_labels(batch_, k, plan_.data.test_file);
        fill_labels(batch_, labels_);
        model_->forward(batch_, logits_);
        const ops::LossStats s = loss_->forward(logits_, labels_);
        sums[0] += s.loss_sum;
        sums[1] += static_cast<double>(s.correct);
        sums[2] += static_cast<double>(batch_.rows());
        if (k == 1)
            for (int64_t i = 0; i < logits_.numel(); ++i) {
                scored.push_back(logits_.data()[i]);
                scored.push_back(batch_.labels[static_cast<size_t>(i)]);
            }
    }
    // From here only collectives (and rank 0's AUC, seconds for tens of millions of rows): a rank stuck in its test
    // share, or frozen, shows here.
    const auto w = watch("the evaluation's collectives", sizeof sums + scored.size() * sizeof(float));
    comm_.allreduce(std::span<double>(sums, 3), comm::ReduceOp::Sum);
    json auc = nullptr;
    if (k == 1) {
        // Exact AUC needs every score in one place: rank 0 gathers the (score, label) pairs (8 bytes a row, into
        // rank 0 only), computes it and tells the others. Rank order, as an allgather would give: the same bits.
        const std::vector<float> all = comm_.gather(scored, 0);
        double value = 0;
        sync::run_then_agree(comm_, [&] {
            if (rank_ != 0) return;
            std::vector<float> scores(all.size() / 2), labels(all.size() / 2);
            for (size_t i = 0; i < scores.size(); ++i) {
                scores[i] = all[2 * i];
                labels[i] = all[2 * i + 1];
            }
            value = nn::exact_auc(scores, labels);
        });
        comm_.broadcast_object(value, 0);
        auc = value;
    }
    const double n = std::max(sums[2], 1.0);
    return {{"test_accuracy", sums[1] / n}, {"test_loss", sums[0] / n}, {"test_logloss", sums[0] / n},
            {"test_auc", auc}, {"test_samples", static_cast<int64_t>(std::llround(sums[2]))}};
}

std::string SparseRun::load_for_evaluation(const std::string& given) {
    // The weights alone, as the dense eval loads them: scoring needs no optimizer state, so a checkpoint of a sweep
    // point that switched optimizer.name (--set) evaluates with the config file as it is.
    std::string loaded;
    sync::run_then_agree(comm_, [&] {
        if (rank_ == 0)
            loaded = load_checkpoint_to_evaluate(given, [&](const std::string& path) {  // a folder: its newest
                load_checkpoint(path, model_->parameters(), nullptr);
            });
    });
    broadcast_from_root();
    return loaded;
}


std::vector<float> SparseRun::parameters_flat() {
    std::vector<float> v;
    for (nn::Parameter* p : model_->parameters()) v.insert(v.end(), p->value.span().begin(), p->value.span().end());
    return v;
}

// ---- summary ----

namespace {

// The summary's pieces, each from what it is about.

// The last evaluation (null entries before any ran).
json eval_block(const json& last_eval) {
    json out = json::object();
    for (const char* key : {"test_accuracy", "test_loss", "test_logloss", "test_auc"})
        out[key] = last_eval.is_object() && last_eval.contains(key) ? last_eval[key] : json(nullptr);
    return out;
}

// Bytes through the communicator and the parameters' hash: this rank's and every rank's.
json traffic_block(const RankTotals& mine, const std::vector<RankTotals>& all) {
    std::vector<uint64_t> sent, received, hashes;
    for (const RankTotals& t : all) {
        sent.push_back(t.bytes_sent);
        received.push_back(t.bytes_received);
        hashes.push_back(t.parameter_hash);
    }
    return {{"bytes_sent", mine.bytes_sent},
            {"bytes_received", mine.bytes_received},
            {"bytes_sent_per_rank", sent},
            {"bytes_received_per_rank", received},
            {"parameter_hash_per_rank", hashes},
            {"parameters_identical",
             std::all_of(hashes.begin(), hashes.end(), [&](uint64_t h) { return h == hashes[0]; })}};
}

// "sync": the mode, how often each way of combining ran, and the gradient bytes each way (this rank's, every rank's).
json sync_block(const RunPlan& plan, const sync::SparseSyncStats& st, int64_t local_sgd_averages,
                const std::vector<RankTotals>& all) {
    std::vector<uint64_t> ag_bytes, dense_bytes;
    std::vector<double> parse_in_waits;
    for (const RankTotals& t : all) {
        ag_bytes.push_back(t.sync_bytes_allgather);
        dense_bytes.push_back(t.sync_bytes_dense);
        parse_in_waits.push_back(t.parse_in_waits_s);
    }
    const bool local_sgd = plan.sync.mode == SyncMode::LocalSgd;
    return {{"mode", to_string(plan.sync.mode)},
            {"sparse", to_string(plan.sync.sparse)},
            {"sparse_update", local_sgd ? json(nullptr) : json(to_string(plan.sync.sparse_update))},
            {"local_sgd_period", local_sgd ? json(plan.sync.local_sgd_period) : json(nullptr)},
            {"local_sgd_averages", local_sgd_averages},
            {"allgather_steps", st.allgather_steps},
            {"dense_steps", st.dense_steps},
            {"bytes_allgather", st.bytes_allgather},
            {"bytes_dense", st.bytes_dense},
            {"second_collectives", st.second_collectives},
            {"owner_steps", st.owner_steps},
            {"bytes_state", st.bytes_state},
            {"state_second_collectives", st.state_second_collectives},
            {"bytes_allgather_per_rank", ag_bytes},
            {"bytes_dense_per_rank", dense_bytes},
            // seconds each rank parsed its next rows while waiting in the gathers instead of spinning (a rank
            // parsing on its training thread, one CPU; 0 with a parse thread)
            {"parse_in_waits_s_per_rank", parse_in_waits}};
}

// "peer_parsing": whether this host's ranks parsed each other's rows in their waits, and how many rows each did.
json peer_parsing_block(const std::string& off, const std::vector<RankTotals>& all) {
    std::vector<int64_t> from, mine_for;
    std::vector<double> secs;
    for (const RankTotals& t : all) {
        from.push_back(t.rows_from_peers);
        mine_for.push_back(t.rows_for_peers);
        secs.push_back(t.seconds_for_peers);
    }
    return {{"on", off.empty()},
            {"off_because", off.empty() ? json(nullptr) : json(off)},
            {"rows_from_peers_per_rank", from},
            {"rows_for_peers_per_rank", mine_for},
            {"seconds_for_peers_per_rank", secs}};
}

}  // namespace

json SparseRun::write_summary() {
    const json summary = gather_summary();  // collective, watched
    if (rank_ == 0) {
        // Rank 0's own write, watched under its own name: a hung file system is not the other ranks' fault.
        const auto w = watch("rank 0's write of output.dir/summary.json", 0);
        telemetry::write_json_atomically(plan_.output.dir + "/summary.json", summary);
    }
    return summary;
}

json SparseRun::gather_summary() {
    // Its gathers and the prediction's probes are collectives; the rest is milliseconds of arithmetic.
    const auto w = watch("the end-of-run summary's collectives", 0);
    const sync::SparseSyncStats& st = gsync_->stats();
    const data::SparseReaderStats rs = train_reader_->stats();
    const RankTotals mine{comm_.bytes_sent(), comm_.bytes_received(), model_->hash(), st.bytes_allgather,
                          st.bytes_dense,   parse_in_waits_s_,     rs.rows_from_peers, rs.rows_for_peers,
                          rs.seconds_for_peers};
    const std::vector<RankTotals> all = comm_.allgather_object(mine);  // before the prediction's probes
    const int64_t batch = plan_.train.batch_size;
    const auto usage = telemetry::current_resource_usage();
    json summary = {
        {"world_size", world_},
        {"batch_size_per_rank", batch},
        {"global_batch_size", batch * world_},
        {"epochs", plan_.train.epochs},
        {"epochs_completed", pos_.epoch},
        {"steps", pos_.global_step},
        {"steps_this_run", steps_run_},
        {"steps_per_epoch", steps_per_epoch_ > 0 ? json(steps_per_epoch_) : json(nullptr)},
        {"stopped_by_max_steps", stopped_by_max_steps()},
        // null unless a stop signal ended the run early (exit 3, a checkpoint at that step), as on the dense path
        {"stopped", stopped_by_signal() ? json("signal " + signal_name(stop_signal_) + " at step " +
                                               std::to_string(pos_.global_step))
                                        : json(nullptr)},
        {"train_loss", std::isfinite(train_loss_) && samples_ > 0 ? json(train_loss_) : json(nullptr)},
        {"wall_s", telemetry::now_seconds() - t_start_},
        {"train_s", train_seconds_},
        {"checkpoint_s", checkpoint_seconds_},
        {"samples_per_s", train_seconds_ > 0 ? samples_ / train_seconds_ : 0.0},
        {"phase_s", phase_seconds_json(phases_)},
        {"backend", comm_.backend()},
        {"device", "cpu"},
        {"model", model_file_.model_name},
        {"model_file", model_path_},
        {"num_features", model_->num_features()},
        {"out_features", model_->out_features()},
        {"optimizer", opt_->name()},
        {"lr", plan_.optimizer.lr},
        {"lr_peak", schedule_->peak()},
        {"lr_scaling", to_string(plan_.optimizer.lr_scaling)},
        {"data", train_reader_->description()},
        {"sync", sync_block(plan_, st, local_sgd_averages_, all)},
        {"peer_parsing", peer_parsing_block(peer_parsing_off_, all)},
        {"cpu_s", usage.cpu_user_s + usage.cpu_system_s},
        {"peak_rss_mb", usage.peak_rss_mb},
        {"resumed", resumed_},
        // rank 0's checkpoint path, as on the dense path (rank 0 writes this file)
        {"resumed_from", resumed_from_.empty() ? json(nullptr) : json(resumed_from_)},
    };
    summary.update(eval_block(last_eval_));
    summary.update(traffic_block(mine, all));
    if (world_ > 1 && plan_.sync.mode == SyncMode::LocalSgd) {  // collective: every rank's work per step
        uint64_t floats = 0, tensors = 0;
        for (std::span<float> values : all_values()) floats += values.size(), ++tensors;
        summary["predicted"] = local_sgd_predicted_section(
            comm_, plan_,
            {phases_, phases_after_first_step_, steps_run_, steps_run_ > 0 ? train_seconds_ / steps_run_ : 0.0,
             plan_.train.batch_size, floats, static_cast<double>(tensors), work_before_opening_, true});
    } else if (world_ > 1) {  // collective: every rank's phases and sync bytes, and two short probes
        summary["predicted"] = sparse_predicted_section(
            comm_, plan_,
            {phases_, steps_run_, train_seconds_, st, model_->num_features(), model_->out_features(), bias_grad_.size(),
             work_before_opening_, work_before_exchange_});
    }
    return summary;
}

}  // namespace ringtrain::train::detail

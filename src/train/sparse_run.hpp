// One sparse run (private to train): the readers, the model and optimizer, the sparse gradient sync, the loop
// position and what the loop measures, with the step and the occasional work around it as methods.
// SparseTrainer::train() is the loop itself, calling these (as Trainer::train() calls TrainingRun's).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/comm/shared_segment.hpp"
#include "ringtrain/core/csr_batch.hpp"
#include "ringtrain/core/sparse_rows.hpp"
#include "ringtrain/data/sparse_peer_board.hpp"
#include "ringtrain/data/sparse_reader.hpp"
#include "ringtrain/nn/loss.hpp"
#include "ringtrain/optim/schedule.hpp"
#include "ringtrain/sync/consistency.hpp"
#include "ringtrain/sync/sparse_gradient_sync.hpp"
#include "ringtrain/sync/stall_inspector.hpp"
#include "ringtrain/telemetry/metrics_writer.hpp"
#include "ringtrain/telemetry/phases.hpp"
#include "ringtrain/telemetry/progress.hpp"
#include "ringtrain/telemetry/straggler.hpp"
#include "ringtrain/telemetry/tensorboard_writer.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/train/config.hpp"
#include "ringtrain/train/stop_request.hpp"
#include "ringtrain/nn/sparse_linear.hpp"
#include "ringtrain/optim/sparse_optimizer.hpp"
#include "output_folder.hpp"
#include "sparse_model_file.hpp"

namespace ringtrain::train::detail {

class SparseRun {
public:
    // Set-up (collective): readers, model and facts on every rank (a failure on any rank ends all of them the same
    // way), the ranks' agreement on the facts, rank 0's parameters everywhere, the gradient sync.
    SparseRun(const Config& config, comm::Communicator& comm);

    // Rank 0 loads the checkpoint the plan names (resume=auto: the newest that verifies) and opens the outputs;
    // every rank then takes rank 0's position and tensors, a fresh start included. Collective.
    void resume();
    bool epochs_left() const;
    void begin_epoch();
    // This rank's vote on a graceful stop from now on (nullptr: none); the caller owns it (its handlers live as
    // long as the loop runs).
    void set_stop_request(StopRequest* stop) { stop_ = stop; }
    // Reads this rank's next batch and agrees with the others whether every rank has one and whether any rank got a
    // stop signal (both flags travel with the previous step's loss in one small allreduce): false ends the epoch on
    // every rank at once, and after a stop (stopped_by_signal()) the loop too. Collective.
    bool next_batch();
    // True (from then on) once the ranks agreed, at a step boundary, that a stop signal came.
    bool stopped_by_signal() const { return stop_signal_ != 0; }
    int64_t global_step() const { return pos_.global_step; }
    const RunPlan& plan() const { return plan_; }
    int rank() const { return rank_; }
    comm::Communicator& comm() { return comm_; }
    // Whether resume() took a checkpoint (every rank), and where it left the loop.
    bool resumed() const { return resumed_; }
    const LoopState& position() const { return pos_; }
    // Forward, loss, backward, the ranks' average of the sparse gradient (or, in local SGD, of all tensors every
    // local_sgd_period steps), the optimizer's update. Returns the learning rate used. Collective.
    float run_step();
    bool log_now() const;
    bool checkpoint_now() const;
    // metrics.jsonl step line: the mean loss over all ranks since the previous regular line (as far as agreed so
    // far). `restart_window` false (a stop's line) keeps counting from that line, as the checkpoint records it.
    void log_step(float lr, bool restart_window = true);
    // Mid-epoch checkpoint (checkpoint.every_steps). Collective.
    void write_step_checkpoint();
    // The epoch's loss, evaluation, the epoch line and checkpoint (unless max_steps ended the run). Collective.
    void end_epoch();
    // After the loop: an evaluation if none ran (not after a stop signal: the scheduler's time is short), the final
    // checkpoint (after a stop signal always, checkpoints off included). Collective.
    void finish();
    // summary.json (rank 0 writes it); every rank returns it. Collective.
    nlohmann::json write_summary();
    nlohmann::json gather_summary();  // write_summary's collective part

    // Test accuracy, loss (= test_logloss) and exact AUC over every rank's share of the test file. Collective.
    nlohmann::json evaluate();
    // The final model's figures as finish() takes them: local SGD's ranks averaged into one model first. Collective.
    nlohmann::json evaluate_final_model() {
        if (plan_.sync.mode == SyncMode::LocalSgd) average_all_tensors();
        return evaluate();
    }
    // Loads `path` on rank 0 and gives its tensors to every rank. Collective.
    std::string load_for_evaluation(const std::string& given);  // returns the file loaded (rank 0; "" elsewhere)
    std::vector<float> parameters_flat();

private:
    int64_t scan_share_for_feature_count() const;
    void build_locally(int64_t max_index);
    sync::Facts facts() const;
    void load_resume_checkpoint();
    void load_checkpoint_for_this_run(const std::string& path);
    void adopt_root_position();
    // Local SGD with several ranks: the ranks' parameters and optimizer state differ between averages, so checkpoints
    // hold every rank's own tensors next to the ranks' average (checkpoint.hpp, RankCopies).
    bool keeps_rank_copies() const;
    void write_checkpoint(const LoopState& at);
    struct AveragedTensors {
        std::vector<nn::Parameter> model;
        std::vector<Tensor> state;  // the optimizer's, in state() order
    };
    AveragedTensors averaged_tensors();
    // The table and bias, then the optimizer's state: what each rank keeps as its own in local SGD.
    std::vector<Tensor*> own_tensors();
    LoopState checkpoint_position();
    // Every tensor the run holds: the table and bias, then the optimizer's state (what local SGD averages).
    std::vector<std::span<float>> all_values();
    void average_all_tensors();
    // Owner updates (sync.sparse_update owner): the rows this rank updated at the last step shared with every rank
    // (and theirs written in), with the opening allreduce's `sums` in the same collective.
    void share_updated_rows(std::span<double> sums);
    // Peer parsing (data/sparse_peer_board.hpp) among this host's ranks: the shared board, or why not. Collective.
    void open_peer_board();
    bool parse_ahead_while_waiting();  // the sync's idle work: a peer's piece parsed, or a few rows of our own ahead
    void book_parse_ahead();
    void broadcast_from_root();
    // The pending loss summed over the ranks; with it, how many ranks have a batch and how many voted to stop.
    void reduce_pending_loss(bool have_batch, int64_t* ranks_with_batch, int64_t* ranks_stopping = nullptr);
    // Whether the loop may stop at this step boundary (local SGD: only where the ranks just averaged).
    bool may_stop_now() const;
    // The ranks agreed to stop: the watchdog stands down, the signal is agreed on, the stopped step is logged.
    void agree_on_stop();
    // The epoch's scalars for TensorBoard: train loss, the evaluation, the time split and bytes so far.
    std::vector<telemetry::Scalar> epoch_scalars() const;
    bool stopped_by_max_steps() const;
    // The stall watchdog's watch over one collective of `bytes` (this rank's payload) at the current step; with
    // `what` null, none.
    sync::StallWatchdog::Watch watch(const char* what, size_t bytes);
    float learning_rate() const;

    const Config config_;
    const RunPlan& plan_;
    comm::Communicator& comm_;
    const int rank_, world_;
    const double t_start_;
    std::string model_path_;
    std::string train_fingerprint_;  // data.train_file's size and edge hash, recorded in checkpoints
    SparseModelFile model_file_;
    // Before the readers: the training reader borrows the board.
    std::unique_ptr<comm::SharedSegment> peer_segment_;
    std::unique_ptr<data::SparsePeerBoard> peer_board_;
    std::string peer_parsing_off_;  // why there is no board ("" when there is one)
    std::unique_ptr<data::SparseBatchReader> train_reader_, test_reader_;
    std::unique_ptr<nn::SparseLinear> model_;
    std::unique_ptr<optim::SparseOptimizer> opt_;
    std::unique_ptr<nn::Loss> loss_;
    std::unique_ptr<optim::LrSchedule> schedule_;
    std::unique_ptr<sync::SparseGradientSync> gsync_;
    // sync.stall_warning_s / stall_abort_s over the collectives every rank must reach (several ranks): a dead or
    // frozen rank is reported, then the job is ended, instead of every other rank waiting for it silently.
    std::unique_ptr<sync::StallWatchdog> stall_watchdog_;
    telemetry::MetricsWriter metrics_;
    // output.progress on rank 0: a line (or the bar) at every logged step and each epoch's results; every call comes
    // from log_step, so it prints each one (every_steps 1).
    telemetry::Progress progress_{to_string(plan_.output.progress), rank_ == 0, 1};
    OutputFolderLock output_lock_;  // rank 0 only: held for the run
    telemetry::TensorBoardWriter tensorboard_;  // rank 0 only, with output.tensorboard
    StopRequest* stop_ = nullptr;
    int stop_signal_ = 0;  // the agreed stop's signal (the highest number any rank got), 0 = none

    // The loop: where it is, and how many steps an epoch has once one has ended (0 until then: the shares are
    // read streaming, so the count is known only by running out).
    LoopState pos_;
    int64_t steps_per_epoch_ = 0;
    bool resumed_ = false;
    std::string resumed_from_;  // rank 0: the checkpoint resume() loaded
    RankCopies resumed_copies_;  // rank 0, between loading a checkpoint and sending every rank its own tensors
    int64_t skip_batches_ = 0;  // resuming inside an epoch: batches of this rank's share already trained on

    // One step's buffers (capacity kept across steps).
    CsrBatch batch_;
    Tensor logits_, labels_, dlogits_;
    SparseRows grad_;
    std::vector<float> bias_grad_;
    SparseRows updated_rows_;  // owner updates: this rank's updated rows out, the other owners' in
    bool rows_pending_ = false;  // updated_rows_ holds this rank's rows of the last step, not yet shared

    // This rank's loss of steps not yet reduced, and all ranks' sums of this epoch / log window.
    double pending_loss_ = 0, pending_rows_ = 0;
    double window_loss_ = 0, window_rows_ = 0, window_t0_ = 0;
    int64_t window_steps_ = 0;
    double train_loss_ = 0;
    double train_seconds_ = 0, epoch_t0_ = 0;
    double checkpoint_seconds_ = 0;  // writing checkpoints (left out of train_seconds_)
    double samples_ = 0;  // every rank's rows trained on by this run
    int64_t steps_run_ = 0;
    int64_t local_sgd_averages_ = 0;
    int64_t last_average_step_ = -1;  // local SGD: the global step the ranks last averaged at
    // A synchronous step has two points where every rank waits for the slowest: the opening collective (after the
    // last update, the next batch's parse, any logging) and the gradient exchange (after forward and backward).
    // Each rank's local work in each of the two stretches, per step, for the prediction's straggler share: the
    // ranks' averages hide the per-step jitter that a lockstep run pays (bench/RESULTS.md, "sparse prediction").
    telemetry::StepWorkLog work_before_opening_, work_before_exchange_;
    std::function<bool()> idle_;         // parse_ahead_while_waiting, for the collectives' waits
    double parsed_while_waiting_s_ = 0;  // parse_ahead_while_waiting's time since book_parse_ahead
    double parse_in_waits_s_ = 0;        // all of it, this run (summary: sync.parse_in_waits_s_per_rank)
    double stretch_start_ = 0;        // the end of the last exchange (or the epoch's start)
    double opening_end_ = 0;          // the end of the last opening collective
    double pending_opening_work_ = 0; // the stretch before the last opening collective, recorded with its step
    double averaging_in_stretch_s_ = 0;  // local SGD: the stretch's parameter average (not local work)
    telemetry::PhaseTimes phases_after_first_step_;  // local SGD's prediction leaves the first step out
    nlohmann::json last_eval_;
    int64_t last_eval_step_ = -1;  // the global step last_eval_ scored
    telemetry::PhaseTimes phases_;
};

}  // namespace ringtrain::train::detail

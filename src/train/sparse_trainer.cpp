// SparseTrainer: the sparse path's loop (see the header); the work is in SparseRun (sparse_run.cpp).
#include "ringtrain/train/sparse_trainer.hpp"

#include "ringtrain/core/error.hpp"
#include "ringtrain/sync/consistency.hpp"
#include "ringtrain/train/stop_request.hpp"
#include "finished_run.hpp"
#include "sparse_model_file.hpp"
#include "sparse_run.hpp"

namespace ringtrain::train {

bool uses_sparse_path(const Config& config, comm::Communicator& comm) {
    const bool sparse = config.plan().data.is_sparse();
    sync::run_then_agree(comm, [&] {
        if (sparse) return;  // the sparse path reads its model file itself, naming what does not fit
        const std::string path = config.model_path();
        if (detail::model_file_has_sparse_layer(path))
            throw InputError(path + ": layers: a sparse_linear layer needs data.format libsvm or criteo (with "
                             "data.train_file and data.test_file); data.format is '" +
                             to_string(config.plan().data.format) + "'");
    });
    // Ranks on different paths would issue different collectives from here on: agree first (the start-up
    // agreement on every key comes later, on each path).
    const std::vector<uint64_t> all = comm.allgather(static_cast<uint64_t>(sparse));
    for (size_t r = 0; r < all.size(); ++r)
        if (all[r] != all[0])
            throw CollectiveInputError("ranks disagree on data.format: rank 0 takes the " +
                                       std::string(all[0] ? "sparse" : "dense") + " path, rank " + std::to_string(r) +
                                       " the " + (all[r] ? "sparse" : "dense") + " one; start every rank with one config");
    return sparse;
}

SparseTrainer::SparseTrainer(const Config& config, comm::Communicator& comm)
    : run_(std::make_unique<detail::SparseRun>(config, comm)) {}

SparseTrainer::~SparseTrainer() = default;

nlohmann::json SparseTrainer::train() {
    detail::SparseRun& run = *run_;
    // SIGTERM, SIGINT and train.stop_signal stop the loop gracefully while train() runs (the handlers are restored
    // when it returns); this rank's vote rides in next_batch's allreduce.
    const RunPlan& plan = run.plan();
    StopRequest stop(stop_signal_number(plan.train.stop_signal), plan.train.stop_grace_s, run.rank(), after_stop_);
    run.set_stop_request(&stop);
    struct Detach {
        detail::SparseRun& run;
        ~Detach() { run.set_stop_request(nullptr); }
    } detach{run};
    run.resume();
    if (run.resumed() && detail::nothing_left(run.position(), plan.train))
        if (auto kept = detail::keep_finished_run_summary(run.comm(), plan, run.position(),
                                                          [&run, &stop] {
                                                              stop.votes_over();  // nothing votes any more
                                                              return run.evaluate_final_model();
                                                          }))
            return *kept;
    while (run.epochs_left()) {
        run.begin_epoch();
        // Every rank has a batch and no rank got a stop signal (agreed with the last step's loss).
        while (run.next_batch()) {
            const float lr = run.run_step();
            if (run.log_now()) run.log_step(lr);
            if (run.checkpoint_now()) run.write_step_checkpoint();
            if (step_callback_) step_callback_(run.global_step());
        }
        run.end_epoch();  // epoch loss, evaluation, epoch checkpoint (not inside an epoch a stop left)
    }
    stop.votes_over();
    run.finish();  // after a stop signal: the checkpoint, always
    return run.write_summary();
}

void SparseTrainer::set_step_callback(std::function<void(int64_t)> callback) { step_callback_ = std::move(callback); }

nlohmann::json SparseTrainer::evaluate_checkpoint(const std::string& checkpoint) {
    const std::string loaded = run_->load_for_evaluation(checkpoint);  // rank 0's: it prints the line
    nlohmann::json r = run_->evaluate();
    r["checkpoint"] = loaded;
    return r;
}

std::vector<float> SparseTrainer::parameters_flat() const { return run_->parameters_flat(); }

}  // namespace ringtrain::train

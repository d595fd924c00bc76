// What a multi-rank run measures for its own prediction (train/run_prediction.hpp), private to train: when each
// gradient became ready in backward, a one-float latency probe at set-up, and the gathering of it all (with every
// rank's bucket times) into summary.json's "predicted".
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/tensor.hpp"
#include "ringtrain/nn/layer.hpp"
#include "ringtrain/sync/gradient_sync.hpp"
#include "ringtrain/sync/sparse_gradient_sync.hpp"
#include "ringtrain/telemetry/phases.hpp"
#include "ringtrain/telemetry/straggler.hpp"
#include "ringtrain/train/run_plan.hpp"

namespace ringtrain::train::detail {

// When each gradient became final, seconds after the last pass's backward began, and how long each whole step took
// (TrainingRun::run_step: passes, allreduce, update), both over every step but the first (allocations, connection
// set-up, the blocking first step of a cycle-time layout): the same steps as the bucket times and the phases the
// prediction uses. One clock read per gradient per step.
class StepClock {
public:
    explicit StepClock(const std::vector<nn::Parameter*>& params);
    void step_began();
    void backward_began();                // the step's last pass, before the loss gradient
    void ready(const nn::Parameter& p);   // from backward's on_ready hook
    void step_ended();
    std::vector<double> mean_ready_s() const;  // per parameter; -1 where never reported
    // The mean step time over the steps after the first; 0 with none. A mean, not a median: the model's inputs are
    // means, and a shaped link's occasional slow step is part of what the run costs.
    double steady_step_s() const;

private:
    std::unordered_map<const nn::Parameter*, size_t> index_;
    std::vector<double> sum_s_;
    std::vector<int64_t> count_;
    double step_began_s_ = 0, backward_began_s_ = 0;
    int64_t steps_ = 0;
    double steps_sum_s_ = 0;
    int64_t steps_counted_ = 0;
};

// The fastest of a few one-float allreduces (each after a barrier), the slowest rank's: the transport's latency, a
// millisecond or so. Collective.
double latency_probe(comm::Communicator& comm);

struct RunTotals {  // what TrainingRun counted
    const telemetry::PhaseTimes& phases;
    const telemetry::PhaseTimes& phases_after_first_step;  // the same when the second step began
    const StepClock& clock;
    const telemetry::StepWorkLog& work_log;  // this rank's local work per step (every rank's is gathered)
    int64_t steps = 0;
    double latency_probe_s = -1;
};

// summary.json's "predicted" (null for one rank; {"why": ...} where the run cannot be predicted: local SGD, the GPU
// path, no synchronised step). Collective: gathers every rank's bucket times and local work per step (the straggler
// share over the same steps as everything else: all but the first).
nlohmann::json predicted_section(comm::Communicator& comm, const sync::GradientSync& gsync,
                                 const std::vector<nn::Parameter*>& params, const RunPlan& plan, Device device,
                                 const RunTotals& totals);

// Local SGD (either path, CPU): what the run counted. Its only collective is the periodic average of every tensor;
// a faster rank waits there for the slowest one's whole period of local work.
struct LocalSgdTotals {
    const telemetry::PhaseTimes& phases;                   // this rank's (sync_wait holds the averagings)
    const telemetry::PhaseTimes& phases_after_first_step;  // the same when the second step began
    int64_t steps = 0;
    double measured_step_s = 0;    // the mean step after the first, averagings included
    int64_t batch_per_rank = 0;
    uint64_t averaged_floats = 0;  // one averaging's payload: every tensor averaged, float32
    double collectives_per_average = 1;
    // This rank's local work between two points where every rank waits for the others: per period between two
    // averagings (dense: nothing else synchronises), or per step (sparse: the opening allreduce of the loss and
    // the have-a-batch flags runs every step; then opening_each_step).
    const telemetry::StepWorkLog& work;
    bool opening_each_step = false;
    double latency_probe_s = -1;  // < 0: taken here
};

// summary.json's "predicted" for a local SGD run: the sparse step model (scaling/sparse_step_model.hpp) with the
// averaging as its exchange (its share of steps 1 / sync.local_sgd_period), the opening allreduce where it runs
// every step, and the straggler share from the logged work (the first entry left out). {"why": ...} with fewer
// than two periods after the first. Collective.
nlohmann::json local_sgd_predicted_section(comm::Communicator& comm, const RunPlan& plan, const LocalSgdTotals& t);

// Every rank's per-step work log (rank r logged counts[r] steps) and how long the ranks waited for the slowest one.
// Collective: every rank joins, whatever its device (an empty log just yields no report).
telemetry::StragglerReport gather_stragglers(comm::Communicator& comm, const telemetry::StepWorkLog& log,
                                             const std::vector<uint64_t>& counts);

// summary.json's "phase_s": seconds per phase, by the phases' names (both paths' summaries).
nlohmann::json phase_seconds_json(const telemetry::PhaseTimes& phases);

// ---- the sparse path ----

struct SparseRunTotals {  // what SparseRun counted, this process's steps
    const telemetry::PhaseTimes& phases;
    int64_t steps = 0;
    double train_s = 0;
    const sync::SparseSyncStats& sync;
    int64_t num_rows = 0, width = 0;  // the table
    size_t dense_size = 0;            // the dense part averaged with it (the bias)
    // Local work per synchronised step before the opening collective and before the exchange (the same steps on
    // every rank).
    const telemetry::StepWorkLog& work_before_opening;
    const telemetry::StepWorkLog& work_before_exchange;
};

// summary.json's "predicted" for a sparse run (null for one rank; {"why": ...} for local SGD or fewer than four
// steps). Collective: gathers every rank's phases and sync bytes, takes a one-float latency probe and times a short
// merge probe (the run's own SparseGradientSync::average on rows of the run's mean count, against a plain gather of
// the same slot: the difference per row is the merge's cost). A few collectives of the run's own size, once.
nlohmann::json sparse_predicted_section(comm::Communicator& comm, const RunPlan& plan, const SparseRunTotals& totals);

}  // namespace ringtrain::train::detail

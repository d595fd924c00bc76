// The run's measurements for its own prediction: see the header.
#include "run_measurements.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/sparse_rows.hpp"
#include "ringtrain/train/run_prediction.hpp"

namespace ringtrain::train::detail {

using nlohmann::json;

namespace {

double clock_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

StepClock::StepClock(const std::vector<nn::Parameter*>& params)
    : sum_s_(params.size(), 0.0), count_(params.size(), 0) {
    for (size_t i = 0; i < params.size(); ++i) index_.emplace(params[i], i);
}

void StepClock::step_began() {
    ++steps_;
    step_began_s_ = clock_s();
}

void StepClock::backward_began() { backward_began_s_ = clock_s(); }

void StepClock::step_ended() {
    if (steps_ < 2) return;
    steps_sum_s_ += clock_s() - step_began_s_;
    ++steps_counted_;
}

double StepClock::steady_step_s() const {
    return steps_counted_ > 0 ? steps_sum_s_ / static_cast<double>(steps_counted_) : 0.0;
}

void StepClock::ready(const nn::Parameter& p) {
    if (steps_ < 2) return;
    const auto it = index_.find(&p);
    if (it == index_.end()) return;
    sum_s_[it->second] += clock_s() - backward_began_s_;
    ++count_[it->second];
}

std::vector<double> StepClock::mean_ready_s() const {
    std::vector<double> out(sum_s_.size(), -1.0);
    for (size_t i = 0; i < out.size(); ++i)
        if (count_[i] > 0) out[i] = sum_s_[i] / static_cast<double>(count_[i]);
    return out;
}

double latency_probe(comm::Communicator& comm) {
    float one = 1.0f;
    comm.allreduce(std::span<float>(&one, 1), comm::ReduceOp::Sum);  // the first pays for connection set-up
    double fastest = 1e30;
    for (int i = 0; i < 8; ++i) {
        comm.barrier();
        const double t0 = clock_s();
        comm.allreduce(std::span<float>(&one, 1), comm::ReduceOp::Sum);
        fastest = std::min(fastest, clock_s() - t0);
    }
    comm.allreduce(std::span<double>(&fastest, 1), comm::ReduceOp::Max);
    return fastest;
}

namespace {
// Every rank's work log without its first entry (the first step's allocations fall unevenly on the ranks), analysed.
// Collective.
telemetry::StragglerReport stragglers_after_first(comm::Communicator& comm, const telemetry::StepWorkLog& log) {
    const std::vector<uint64_t> counts = comm.allgather(static_cast<uint64_t>(log.seconds().size()));
    const std::vector<float> works = comm.allgather(log.seconds());
    std::vector<std::vector<float>> per_rank;
    for (size_t r = 0, off = 0; r < counts.size() && off + counts[r] <= works.size(); off += counts[r], ++r)
        per_rank.emplace_back(works.begin() + static_cast<std::ptrdiff_t>(off + std::min<uint64_t>(counts[r], 1)),
                              works.begin() + static_cast<std::ptrdiff_t>(off + counts[r]));
    return telemetry::analyse_stragglers(per_rank);
}
}  // namespace

json predicted_section(comm::Communicator& comm, const sync::GradientSync& gsync,
                       const std::vector<nn::Parameter*>& params, const RunPlan& plan, Device device,
                       const RunTotals& totals) {
    if (comm.size() < 2) return nullptr;
    // The same answer on every rank (plan, agreed device, steps run together), so all or none gather below.
    if (plan.sync.mode == SyncMode::LocalSgd)
        return {{"why", "sync.mode local_sgd: no per-step gradient allreduce to fit a link from"}};
    if (device != Device::CPU)
        return {{"why", "the GPU path: gradient ready times are host enqueue times, not when the GPU finished"}};
    if (totals.steps < 4) return {{"why", "fewer than four steps ran: too few to time after the first"}};

    const sync::SyncStats stats = gsync.stats();
    std::vector<float> mine;
    for (const sync::BucketStat& b : stats.buckets)
        mine.push_back(b.calls ? static_cast<float>(b.total_s / static_cast<double>(b.calls)) : 0.0f);
    const std::vector<float> all = comm.allgather(std::span<const float>(mine));

    RunMeasurements m;
    m.ranks = comm.size();
    m.batch_per_rank = plan.train.batch_size;
    m.passes = plan.sync.backward_passes_per_step;
    // The steps after the first (its set-up is not what the model describes, and its allocations made it slower),
    // for the measured step as for the phases.
    m.measured_step_s = totals.clock.steady_step_s();
    const double steps = static_cast<double>(totals.steps - 1);
    auto per_step = [&](telemetry::Phase ph) {
        return (totals.phases.get(ph) - totals.phases_after_first_step.get(ph)) / steps;
    };
    m.data_s = per_step(telemetry::Phase::Data);
    m.forward_s = per_step(telemetry::Phase::Forward);
    m.backward_s = per_step(telemetry::Phase::Backward);
    m.optimizer_s = per_step(telemetry::Phase::Optimizer);
    for (const nn::Parameter* p : params) {
        m.grad_floats.push_back(static_cast<size_t>(p->grad.numel()));
        m.grad_names.push_back(p->name);
    }
    m.ready_s = totals.clock.mean_ready_s();
    for (size_t b = 0; b < gsync.bucket_count(); ++b) m.tensors_per_bucket.push_back(gsync.bucket_params(b).size());
    const size_t buckets = mine.size();
    m.bucket_s.assign(buckets, 0.0);
    for (size_t b = 0; b < buckets; ++b) {
        double sum = 0;
        for (int r = 0; r < m.ranks && static_cast<size_t>(r) * buckets + b < all.size(); ++r)
            sum += all[static_cast<size_t>(r) * buckets + b];
        m.bucket_s[b] = sum / m.ranks;
    }
    m.latency_probe_s = totals.latency_probe_s;
    // Every rank's local work per step, the first step left out (its allocations fall unevenly on the ranks).
    const telemetry::StragglerReport st = stragglers_after_first(comm, totals.work_log);
    if (st.steps > 0 && !st.mean_work_ms_per_rank.empty()) {
        m.mean_work_s = st.work_s / static_cast<double>(st.steps);
        m.slowest_work_s = (st.work_s + st.straggler_s) / static_cast<double>(st.steps);
        m.rank0_work_s = 1e-3 * st.mean_work_ms_per_rank[0];
    }
    m.wire_bytes_per_float = plan.sync.compression == Compression::None ? 4.0 : 2.0;
    m.overlap = gsync.overlapping();
    m.backend = gsync.communicator().backend();
    try {
        return run_prediction_json(predict_run(m));
    } catch (const Error& e) {
        return {{"why", e.what()}};
    }
}

telemetry::StragglerReport gather_stragglers(comm::Communicator& comm, const telemetry::StepWorkLog& log,
                                             const std::vector<uint64_t>& counts) {
    const std::vector<float> all = comm.allgather(log.seconds());
    std::vector<std::vector<float>> work_per_rank;
    for (size_t r = 0, off = 0; r < counts.size() && off + counts[r] <= all.size(); off += counts[r], ++r)
        work_per_rank.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(off),
                                   all.begin() + static_cast<std::ptrdiff_t>(off + counts[r]));
    return telemetry::analyse_stragglers(work_per_rank);
}

json local_sgd_predicted_section(comm::Communicator& comm, const RunPlan& plan, const LocalSgdTotals& t) {
    if (comm.size() < 2) return nullptr;
    const int world = comm.size();
    const int64_t period = std::max<int64_t>(plan.sync.local_sgd_period, 1);
    // Every rank's entries (the same count on every rank: they wait for each other there), the first left out.
    const telemetry::StragglerReport st = stragglers_after_first(comm, t.work);
    const double probe = t.latency_probe_s >= 0 ? t.latency_probe_s : latency_probe(comm);
    // The averagings' time per step, the mean rank's (a faster rank's holds its wait for the slowest).
    using telemetry::Phase;
    const double steps = static_cast<double>(std::max<int64_t>(t.steps - 1, 1));
    auto per_step = [&](Phase ph) { return (t.phases.get(ph) - t.phases_after_first_step.get(ph)) / steps; };
    double sync_s = per_step(Phase::SyncWait);
    comm.allreduce(std::span<double>(&sync_s, 1), comm::ReduceOp::Average);
    const int64_t entries_needed = t.opening_each_step ? 2 * period : 2;
    if (st.steps < entries_needed || t.steps < 4 || !(t.measured_step_s > 0) || !(sync_s > 0))
        return {{"why", "sync.mode local_sgd: fewer than two averaging periods after the first ran; train longer "
                        "than 3 x sync.local_sgd_period steps"}};

    SparseRunMeasurements m;
    m.ranks = world;
    m.batch_per_rank = t.batch_per_rank;
    m.measured_step_s = t.measured_step_s;
    m.data_s = per_step(Phase::Data);
    m.forward_s = per_step(Phase::Forward);
    m.backward_s = per_step(Phase::Backward);
    m.optimizer_s = per_step(Phase::Optimizer);
    m.sync_s = sync_s;
    // Per step: an entry's work over its steps. The slowest rank's minus the mean is the wait inside the
    // collectives; the slowest's over rank 0's is the straggler share.
    const double periods = static_cast<double>(st.steps), p = t.opening_each_step ? 1.0 : static_cast<double>(period);
    m.mean_before_sync_s = st.work_s / periods / p;
    m.slowest_before_sync_s = (st.work_s + st.straggler_s) / periods / p;
    m.slowest_work_s = m.slowest_before_sync_s;
    m.rank0_work_s = 1e-3 * st.mean_work_ms_per_rank.at(0) / p;
    // One entry for the whole average, as its share of steps reads (its few fused allreduces' extra latency is
    // left out: microseconds against a period of steps).
    const auto calls = static_cast<long long>(std::llround(std::max(t.collectives_per_average, 1.0)));
    m.exchange = {{"parameter average (" + std::to_string(calls) + (calls == 1 ? " allreduce" : " allreduces") +
                       " every " + std::to_string(period) + " steps)",
                   scaling::CollectiveKind::Allreduce, 4.0 * static_cast<double>(t.averaged_floats),
                   1.0 / static_cast<double>(period)}};
    m.opening_in_exchange = !t.opening_each_step;  // dense: no per-step collective of its own
    m.latency_probe_s = probe;
    m.timed = "this run's parameter averages (their time less the wait for the slowest rank)";
    m.backend = comm.backend();
    try {
        json j = sparse_run_prediction_json(predict_sparse_run(m), m);
        for (const char* k : {"merge_rows_per_step", "merge_s_per_row", "merge_s_per_row_probe"}) j.erase(k);
        j["setting"] = "local SGD: every tensor averaged every " + std::to_string(period) + " steps, " +
                       (m.backend == "ring" ? "ring formulas" : m.backend + " (modelled by the ring formulas)");
        return j;
    } catch (const Error& e) {
        return {{"why", e.what()}};
    }
}

// ---- the sparse path ----

namespace {

// Rows per rank the probe sends, and each rank's slot in floats, as SparseGradientSync sizes it once the counts are
// known: [count (2 floats) | dense part | room ids | room rows], room = the largest count and a quarter more + 64
// (its capacity rule, sparse_gradient_sync.cpp), so the plain gather moves what average()'s gather moves.
size_t probe_slot_floats(size_t rows, size_t width, size_t dense_size) {
    return 2 + dense_size + (rows + rows / 4 + 64) * (1 + width);
}

struct MergeProbe {
    double average_s = 0, gather_s = 0;  // the fastest of a few, the slowest rank's
    size_t rows = 0;                     // per rank
};

// SparseGradientSync::average on `rows` rows per rank (disjoint between ranks: the merge's largest union), and a
// plain gather of the same slot. Collective.
MergeProbe probe_merge(comm::Communicator& comm, int64_t num_rows, int64_t width, size_t dense_size, size_t rows) {
    const auto world = static_cast<size_t>(comm.size());
    // The merge's cost per row is what is measured: a few thousand rows show it, and keep the probe to milliseconds
    // on a slow link whatever the run's batch (15 gathers of the slot).
    constexpr size_t kMaxProbeRows = 8192;
    rows = std::min({rows, kMaxProbeRows, static_cast<size_t>(num_rows) / world});
    sync::SparseGradientSync probe(comm, num_rows, width, sync::SparseSyncMethod::Allgather);
    SparseRows grad;
    std::vector<float> dense(dense_size, 0.0f);
    auto fill = [&] {
        grad.width = width;
        grad.rows.resize(rows);
        for (size_t i = 0; i < rows; ++i) grad.rows[i] = static_cast<uint32_t>(i * world + static_cast<size_t>(comm.rank()));
        grad.values.assign(rows * static_cast<size_t>(width), 0.5f);
    };
    constexpr int kRepeats = 7;
    MergeProbe p{1e30, 1e30, rows};
    fill();
    probe.average(grad, dense);  // sizes the slots (the first call gathers counts with no room)
    for (int i = 0; i < kRepeats; ++i) {
        fill();
        comm.barrier();
        const double t0 = clock_s();
        probe.average(grad, dense);
        p.average_s = std::min(p.average_s, clock_s() - t0);
    }
    std::vector<float> send(probe_slot_floats(rows, static_cast<size_t>(width), dense_size), 0.0f);
    std::vector<size_t> counts(world, send.size());
    std::vector<float> all(send.size() * world);
    for (int i = 0; i < kRepeats; ++i) {
        comm.barrier();
        const double t0 = clock_s();
        comm.allgatherv_into(send, counts, all);
        p.gather_s = std::min(p.gather_s, clock_s() - t0);
    }
    double v[2] = {p.average_s, p.gather_s};
    comm.allreduce(std::span<double>(v, 2), comm::ReduceOp::Max);
    return {v[0], v[1], rows};
}

struct SparseRankTotals {  // one rank's, per step
    double data_s, forward_s, backward_s, optimizer_s, sync_s;
    uint64_t bytes_allgather, bytes_dense, bytes_state;
};

// What the average rank waited per step at one of the step's waiting points, from every rank's log of its work
// before that point (collective; the logs are equally long: every rank records the same steps).
double per_step_wait(comm::Communicator& comm, const telemetry::StepWorkLog& log) {
    const std::vector<uint64_t> counts(static_cast<size_t>(comm.size()), log.seconds().size());
    const telemetry::StragglerReport st = gather_stragglers(comm, log, counts);
    return st.steps > 0 ? st.straggler_s / static_cast<double>(st.steps) : 0.0;
}

}  // namespace

json sparse_predicted_section(comm::Communicator& comm, const RunPlan& plan, const SparseRunTotals& t) {
    if (comm.size() < 2) return nullptr;
    // The same answer on every rank (plan, steps run together), so all or none take the collectives below.
    if (plan.sync.mode == SyncMode::LocalSgd)
        return {{"why", "sync.mode local_sgd: no per-step gradient exchange to fit a link from"}};
    if (t.steps < 4) return {{"why", "fewer than four steps ran: too few to time"}};
    const int world = comm.size();
    const double steps = static_cast<double>(t.steps);
    using telemetry::Phase;
    const SparseRankTotals mine{t.phases.get(Phase::Data) / steps,     t.phases.get(Phase::Forward) / steps,
                                t.phases.get(Phase::Backward) / steps, t.phases.get(Phase::Optimizer) / steps,
                                t.phases.get(Phase::SyncWait) / steps, t.sync.bytes_allgather, t.sync.bytes_dense,
                                t.sync.bytes_state};
    const std::vector<SparseRankTotals> all = comm.allgather_object(mine);

    SparseRunMeasurements m;
    m.ranks = world;
    m.batch_per_rank = plan.train.batch_size;
    m.measured_step_s = t.train_s / steps;
    m.data_s = all[0].data_s;
    m.forward_s = all[0].forward_s;
    m.backward_s = all[0].backward_s;
    m.optimizer_s = all[0].optimizer_s;
    m.rank0_work_s = m.data_s + m.forward_s + m.backward_s + m.optimizer_s;
    // A step has two points where every rank waits for the slowest: the opening collective (after the update and
    // the next batch's parse) and the exchange (after forward and backward). What the average rank waits is, per
    // step and stretch, the slowest rank's work less the mean (from the per-step logs: averages over the run would
    // hide the jitter a lockstep step pays).
    const double wait_opening = per_step_wait(comm, t.work_before_opening);
    const double wait_exchange = per_step_wait(comm, t.work_before_exchange);
    const bool owner = t.sync.owner_steps > 0;
    uint64_t bytes_allgather = 0, bytes_dense = 0, bytes_state = 0;
    for (const SparseRankTotals& r : all) {
        m.sync_s += r.sync_s / world;
        m.mean_before_sync_s += (r.forward_s + r.backward_s) / world;
        bytes_allgather += r.bytes_allgather;
        bytes_dense += r.bytes_dense;
        bytes_state += r.bytes_state;
    }
    // The timed sync holds both waits: the exchange's and the opening collective's (the opening allreduce, or with
    // owner updates the share of the updated rows).
    m.slowest_before_sync_s = m.mean_before_sync_s + wait_exchange + wait_opening;
    m.slowest_work_s = m.rank0_work_s + wait_opening + wait_exchange;
    // The exchange per step, from the sync's byte counts (its header: allgather sends (N−1)·(rows·(1 + w) + the
    // dense part) floats per rank; dense sends the ring's 2(N−1)/N of the buffer; the owners' updated rows are
    // counted with the allgather's bytes and come off it here).
    const int64_t sync_steps = t.sync.allgather_steps + t.sync.dense_steps;
    const auto w = static_cast<double>(t.width), nd = static_cast<double>(t.dense_size);
    const double n = world;
    size_t probe_rows = 0;
    if (t.sync.allgather_steps > 0 && sync_steps > 0) {
        const double gradient_bytes = static_cast<double>(bytes_allgather - std::min(bytes_allgather, bytes_state));
        const double floats_per_rank = gradient_bytes / (n * static_cast<double>(t.sync.allgather_steps) * (n - 1) * 4);
        const double rows = std::max(0.0, (floats_per_rank - nd) / (1 + w));
        probe_rows = static_cast<size_t>(std::llround(rows));
        const double share = static_cast<double>(t.sync.allgather_steps) / static_cast<double>(sync_steps);
        m.exchange.push_back({"slot allgather", scaling::CollectiveKind::Allgather,
                              4.0 * static_cast<double>(probe_slot_floats(probe_rows, t.width, t.dense_size)), share});
        m.merge_rows = share * (owner ? 1.0 : n) * rows;  // owner updates: each rank merges its 1/N of every list
    }
    if (owner && sync_steps > 0) {
        // The owners' updated rows (id + weight and state row) in the next step's opening collective, which replaces
        // the opening allreduce: every rank's mean share of them per owner step.
        const double per_rank = static_cast<double>(bytes_state) / (n * (n - 1) * static_cast<double>(t.sync.owner_steps));
        m.exchange.push_back({"updated rows allgather (opening)", scaling::CollectiveKind::Allgather, per_rank,
                              static_cast<double>(t.sync.owner_steps) / static_cast<double>(sync_steps)});
        m.opening_in_exchange = true;
    }
    if (t.sync.dense_steps > 0 && sync_steps > 0) {
        const double buffer = static_cast<double>(bytes_dense) / (n * static_cast<double>(t.sync.dense_steps)) * n /
                              (2 * (n - 1));
        m.exchange.push_back({"dense allreduce", scaling::CollectiveKind::Allreduce, buffer,
                              static_cast<double>(t.sync.dense_steps) / static_cast<double>(sync_steps)});
    }
    if (sync_steps > t.sync.owner_steps) {
        // After the other steps the opening allreduce (loss sums, batch and stop votes) opens the next one; timed
        // with the sync as well, it is an entry of the exchange, so the link fitted to the sync's time does not
        // count it twice.
        m.exchange.push_back({"opening allreduce", scaling::CollectiveKind::Allreduce, 4.0 * sizeof(double),
                              static_cast<double>(sync_steps - t.sync.owner_steps) / static_cast<double>(sync_steps)});
        m.opening_in_exchange = true;
    }
    // Every rank computed the same probe_rows (from gathered bytes), so all or none probe.
    if (probe_rows > 0) {
        const MergeProbe probe = probe_merge(comm, t.num_rows, t.width, t.dense_size, probe_rows);
        if (probe.rows > 0)
            m.merge_s_per_row = std::max(0.0, probe.average_s - probe.gather_s) / (n * static_cast<double>(probe.rows));
    }
    m.latency_probe_s = latency_probe(comm);
    m.backend = comm.backend();
    try {
        return sparse_run_prediction_json(predict_sparse_run(m), m);
    } catch (const Error& e) {
        return {{"why", e.what()}};
    }
}

}  // namespace ringtrain::train::detail

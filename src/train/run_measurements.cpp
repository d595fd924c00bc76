// The run's measurements for its own prediction: see the header.
#include "run_measurements.hpp"

#include <algorithm>
#include <chrono>
#include <span>

#include "ringtrain/core/error.hpp"
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
    const std::vector<uint64_t> counts = comm.allgather(static_cast<uint64_t>(totals.work_log.seconds().size()));
    const std::vector<float> works = comm.allgather(totals.work_log.seconds());
    std::vector<std::vector<float>> per_rank;
    for (size_t r = 0, off = 0; r < counts.size() && off + counts[r] <= works.size(); off += counts[r], ++r)
        per_rank.emplace_back(works.begin() + static_cast<std::ptrdiff_t>(off + std::min<uint64_t>(counts[r], 1)),
                              works.begin() + static_cast<std::ptrdiff_t>(off + counts[r]));
    const telemetry::StragglerReport st = telemetry::analyse_stragglers(per_rank);
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

}  // namespace ringtrain::train::detail

#include "ringtrain/sync/batch_stats_reducer.hpp"

namespace ringtrain::sync {

void CommBatchStatsReducer::sum(std::span<double> values) {
    if (comm_.size() == 1 || values.empty()) return;
    const StallWatchdog::Watch watch(watchdog_, "the synchronised BatchNorm statistics' allreduce",
                                     values.size_bytes(), -1);
    comm_.allreduce(values, comm::ReduceOp::Sum);
    ++collectives_;
}

}  // namespace ringtrain::sync

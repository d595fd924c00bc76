// BlockingHostReducer: nothing runs behind the caller's back; reduce_step() fills, reduces and unpacks the buckets
// one by one on the calling thread (the same arithmetic and layout as the overlapped path, so bitwise the same
// result). Taken when overlap is off, with a single bucket (nothing to overlap: it can only be reduced once backward
// is over), without MPI_THREAD_MULTIPLE, and for the first step of a cycle-time layout.
#include "bucket_reducer.hpp"
#include "mono_clock.hpp"

namespace ringtrain::sync {

namespace {

class BlockingHostReducer final : public ArenaReducer {
public:
    explicit BlockingHostReducer(const ReducerContext& ctx) : ArenaReducer(ctx, Device::CPU), allreduce_(ctx) {}

    double reduce_step(int64_t step) override {
        double blocked = 0;
        for (size_t b = 0; b < ctx_.layout.size(); ++b) {
            fill(b, step);
            const double t0 = mono_s();
            allreduce_.run(b, step, bucket_data(b), reduce_count(b));
            blocked += mono_s() - t0;
            unpack(b);
        }
        end_step();
        return blocked;
    }
    bool overlapping() const override { return false; }
    bool on_device() const override { return false; }

private:
    void bucket_filled(size_t, int64_t) override {}

    HostBucketAllreduce allreduce_;
};

}  // namespace

std::unique_ptr<BucketReducer> make_blocking_host_reducer(const ReducerContext& ctx) {
    return std::make_unique<BlockingHostReducer>(ctx);
}

}  // namespace ringtrain::sync

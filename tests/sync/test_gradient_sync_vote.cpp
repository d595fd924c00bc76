// SyncOptions::vote: one float riding in the last bucket's allreduce tells every rank whether any rank voted, with no
// collective of its own, on the blocking and the overlapped host paths, with 32- and 16-bit wire formats; the
// gradients still average as before.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <atomic>
#include <cmath>
#include <limits>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/sync/gradient_sync.hpp"
#include "sync_test_util.hpp"

using namespace ringtrain;
using namespace sync_test;

TEST_CASE("a vote of one rank reaches every rank in the gradient allreduce, at no extra collective", "[sync][vote]") {
    const int n = world_size(), me = world_rank();
    struct Variant {
        const char* name;
        size_t fusion;
        bool overlap;
        comm::WireFormat wire;
    };
    const Variant variants[] = {
        {"one bucket, blocking", std::numeric_limits<size_t>::max(), false, comm::WireFormat::Float32},
        {"1 KiB buckets, overlap", 1024, true, comm::WireFormat::Float32},
        {"1 KiB buckets, overlap, fp16", 1024, true, comm::WireFormat::Float16},
        {"1 KiB buckets, overlap, bf16", 1024, true, comm::WireFormat::BFloat16},
    };
    for (const char* backend : {"ring", "mpi"})
        for (const Variant& v : variants) {
            INFO(backend << " / " << v.name);
            ParamSet ps;
            std::atomic<int> vote{0};
            sync::SyncOptions o;
            o.fusion_bytes = v.fusion;
            o.overlap = v.overlap;
            o.wire = v.wire;
            o.cycle_time_ms = 0;
            sync::GradientSync gs(comm::make_communicator(backend), ps.ptrs, o);
            CHECK(!gs.carries_vote());  // not until asked
            gs.set_vote(&vote);
            CHECK(gs.carries_vote() == (n > 1));
            for (int64_t step = 0; step < 4; ++step) {
                gs.begin_step(step);
                fill_grads(ps, me, step, 3);
                // The last rank votes in step 2 only, between two gradients of backward: it is read when the last
                // bucket is packed.
                for (size_t k = ps.ptrs.size(); k-- > 0;) {
                    if (k == ps.ptrs.size() / 2) vote.store(step == 2 && me == n - 1 ? 10 : 0);
                    gs.on_gradient_ready(*ps.ptrs[k]);
                }
                gs.synchronize();
                CHECK(gs.vote_any() == (n > 1 && step == 2));
                if (v.wire == comm::WireFormat::Float32) {
                    // The gradients are still the average (the vote slot is not one of them).
                    size_t outside = 0;
                    for (size_t i = 0; i < ps.ptrs.size(); ++i) {
                        const size_t count = static_cast<size_t>(ps.ptrs[i]->grad.numel());
                        std::vector<double> mean(count, 0.0);
                        for (int r = 0; r < n; ++r) {
                            const auto g = grad_values(count, r, step, i, 3);
                            for (size_t j = 0; j < count; ++j) mean[j] += g[j] / n;
                        }
                        for (size_t j = 0; j < count; ++j)
                            outside += std::fabs(ps.ptrs[i]->grad.data()[j] - mean[j]) > 1e-6 + 1e-5 * std::fabs(mean[j]);
                    }
                    CHECK(outside == 0);
                }
            }
            const auto st = gs.stats();
            CHECK(st.collectives == (n > 1 ? 4 * gs.bucket_count() : 0));
            gs.set_vote(nullptr);
            CHECK(!gs.carries_vote());
        }
}

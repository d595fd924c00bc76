// SparseGradientSync's set-up: allocate_dense_buffer takes the dense way's whole buffer at once (so a table too
// large for it fails at start-up, not at the first dense step), and nothing for allgather or one rank.
#include <catch2/catch.hpp>
#include <mpi.h>
#include <unistd.h>

#include <fstream>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/sync/sparse_gradient_sync.hpp"

using namespace ringtrain;
using sync::SparseGradientSync;
using sync::SparseSyncMethod;

namespace {

// This process's resident memory in bytes (/proc/self/statm's second field, in pages).
double resident_bytes() {
    std::ifstream in("/proc/self/statm");
    long size = 0, resident = 0;
    in >> size >> resident;
    return double(resident) * double(::sysconf(_SC_PAGESIZE));
}

}  // namespace

TEST_CASE("allocate_dense_buffer takes the dense buffer at set-up, and only where a dense step can come",
          "[sparse_sync]") {
    auto comm = comm::make_communicator("ring");
    constexpr int64_t kRows = int64_t{1} << 24;  // x 1 float: 64 MiB
    for (auto method : {SparseSyncMethod::Dense, SparseSyncMethod::Auto, SparseSyncMethod::Allgather}) {
        SparseGradientSync s(*comm, kRows, 1, method);
        const double before = resident_bytes();
        s.allocate_dense_buffer(1);
        const double grown = resident_bytes() - before;
        INFO("method " << static_cast<int>(method) << ", grown " << grown << " bytes on " << comm->size() << " ranks");
        if (comm->size() > 1 && method != SparseSyncMethod::Allgather)
            CHECK(grown >= 0.95 * 4.0 * double(kRows));
        else
            CHECK(grown < 0.5 * 4.0 * double(kRows));
    }
}

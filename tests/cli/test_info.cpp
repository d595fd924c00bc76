// `ringtrain info` reports ranks, hosts and local ranks from MPI itself.
#include <catch2/catch.hpp>

#include "support/run_command.hpp"

using namespace rt_test;

TEST_CASE("info lists every rank with its local rank", "[cli][mpi]") {
    const auto r = run_command(mpirun(2) + binary() + " info");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("2 rank(s) on 1 host(s)"));
    CHECK_THAT(r.output, Catch::Contains("rank 1: host"));
    CHECK_THAT(r.output, Catch::Contains("local rank 1 of 2"));
    CHECK_THAT(r.output, Catch::Contains("backends built: ring, mpi"));
}

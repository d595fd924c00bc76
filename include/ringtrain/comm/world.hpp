// Whole-job agreement before any Communicator exists (e.g. on whether every rank could read its config).
// Uses MPI_COMM_WORLD directly; every rank must call it at the same point.
#pragma once

namespace ringtrain::comm {

// The largest `value` over all ranks of MPI_COMM_WORLD.
int max_over_world(int value);

}  // namespace ringtrain::comm

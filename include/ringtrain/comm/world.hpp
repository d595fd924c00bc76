// Whole-job agreement before any Communicator exists (e.g. on whether every rank could read its config).
// Uses MPI_COMM_WORLD directly; every rank must call it at the same point.
#pragma once

namespace ringtrain::comm {

// The largest `value` over all ranks of MPI_COMM_WORLD.
int max_over_world(int value);

// Ends the whole job with `exit_code` (MPI_Abort on MPI_COMM_WORLD; a plain exit where MPI is not initialised):
// for a rank that failed on its own before it has a Communicator (opening one: the others may be waiting in it).
[[noreturn]] void abort_world(int exit_code);

}  // namespace ringtrain::comm

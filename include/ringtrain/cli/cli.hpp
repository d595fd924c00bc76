// Command-line front end: `ringtrain train|eval|info`, flags and --set overrides, and the one place where
// errors become one clear line and an exit code (2 bad input, 1 anything else).
#pragma once

namespace ringtrain::cli {

// Runs the command in argv; MPI must already be initialised. Returns the process exit code, or brings the
// whole job down (MPI_Abort) when one rank fails while the others may be inside a collective.
int run(int argc, char** argv, int world_rank, int world_size);

}  // namespace ringtrain::cli

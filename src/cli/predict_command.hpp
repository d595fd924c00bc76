// `ringtrain predict`: its flags and its run (private to cli).
#pragma once

namespace ringtrain::cli {

// Parses and runs `ringtrain predict ...`; returns the exit code (2 for bad input, one line on stderr).
int run_predict(int argc, char** argv, int world_rank, int world_size);

}  // namespace ringtrain::cli

// `ringtrain make-clicklog`: writes a click log drawn from a known logistic model (data/click_log_generator.hpp).
#pragma once

namespace ringtrain::cli {

// argv[0] is the program, argv[1] "make-clicklog". Returns the exit code (2 for bad arguments).
int run_make_clicklog(int argc, char** argv, int world_size);

}  // namespace ringtrain::cli

// `ringtrain make-image-folder`: writes a folder of synthetic pictures, one sub-folder per class, that a small CNN
// can learn to tell apart (data/image_folder_generator.hpp).
#pragma once

namespace ringtrain::cli {

// argv[0] is the program, argv[1] "make-image-folder". Returns the exit code (2 for bad arguments).
int run_make_image_folder(int argc, char** argv, int world_size);

}  // namespace ringtrain::cli

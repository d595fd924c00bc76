// Private to src/ops/cuda: the process's one cuDNN handle (made in dnn.cpp on first use, on the legacy default
// stream), for the ops outside dnn.cpp that call cuDNN (batchnorm.cpp).
#pragma once

#include <cudnn.h>

namespace ringtrain::ops::cuda {

cudnnHandle_t cudnn_handle();

}  // namespace ringtrain::ops::cuda

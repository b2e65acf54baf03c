#pragma once
// A convolution problem as the hand-written CUDA convolution kernels take it: a ConvProblem's
// fields (runtime/cuda/cudnn_graphs.h, which CUDA sources do not include). Layouts as there: X and
// dY NHWC, W and dW KRSC, all of the io dtype.
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cuda {

struct ConvShape {
  int64_t n = 0, h = 0, w = 0, c = 0, k = 0, r = 0, s = 0, stride = 1, pad = 0, ho = 0, wo = 0;
  DType io = DType::F32;
};

}  // namespace kiln::cuda

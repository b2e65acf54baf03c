#pragma once
// A convolution problem as the hand-written CUDA convolution kernels take it: a ConvProblem
// (runtime/cuda/cudnn_graphs.h, which CUDA sources do not include) of a square window, one stride
// and one padding on every side, no dilation, one group (conv_cuda.h's conv_shape refuses any
// other). Layouts as there: X and dY NHWC, W and dW KRSC, all of the io dtype.
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cuda {

struct ConvShape {
  int64_t n = 0, h = 0, w = 0, c = 0, k = 0, r = 0, s = 0, stride = 1, pad = 0, ho = 0, wo = 0;
  DType io = DType::F32;
};

}  // namespace kiln::cuda

#pragma once
// The convolution family's cuDNN graphs (defined in conv_cudnn_graphs_cuda.cpp, run by
// runtime/cuda's CudnnGraphs). The conv ops use them, and so do CBR and the ResNet block ends for
// their convolutions. Each names the Pointers it reads and writes; the names are plan cache keys
// (CudnnGraphDef::name), so they stay as earlier runs stored them.
#include "runtime/cuda/cudnn_graphs.h"

namespace kiln::cuda {

extern const CudnnGraphDef kConvFpropGraph;          // CONV_FPROP: x, w -> y
extern const CudnnGraphDef kConvFpropGenstatsGraph;  // CONV_FPROP_GENSTATS: x, w -> y, sum[k], sq_sum[k]
                                                     // (fp32 per-channel sum and sum of squares of y)
extern const CudnnGraphDef kConvFpropSumsGraph;     // CONV_FPROP_SUMS: x, w -> y, sum[k], sq_sum[k] as
                                                     // reductions (runtime fusion; bf16 and fp32 too)
extern const CudnnGraphDef kConvDgradGraph;          // CONV_DGRAD: dy, w -> dx
extern const CudnnGraphDef kConvWgradGraph;          // CONV_WGRAD: dy, x -> dw

}  // namespace kiln::cuda

#pragma once
// CBR's cuDNN graph (defined in cbr_cudnn_graphs_cuda.cpp, run by runtime/cuda's CudnnGraphs):
// inference's convolution, scale, shift and ReLU in one graph. CBR's other convolutions use the
// conv family's graphs (ops/conv/conv_cudnn_graphs_cuda.h). The name is a plan cache key
// (CudnnGraphDef::name), so it stays as earlier runs stored it.
#include "runtime/cuda/cudnn_graphs.h"

namespace kiln::cuda {

// CONV_SCALE_SHIFT_RELU: x, w, scale[k], shift[k] (fp32) -> y = relu(conv(x, w) * scale + shift)
extern const CudnnGraphDef kConvScaleShiftReluGraph;

}  // namespace kiln::cuda

#pragma once
// CBR's cuDNN graphs (defined in cbr_cudnn_graphs_cuda.cpp, run by runtime/cuda's CudnnGraphs):
// inference's convolution, scale, shift and ReLU in one graph, and a seam consumer's convolution
// with the producer's BatchNorm + ReLU in its prologue (cbr_seam_cuda.h). CBR's other convolutions use the
// conv family's graphs (ops/conv/conv_cudnn_graphs_cuda.h). The name is a plan cache key
// (CudnnGraphDef::name), so it stays as earlier runs stored it.
#include "runtime/cuda/cudnn_graphs.h"

namespace kiln::cuda {

// CONV_SCALE_SHIFT_RELU: x, w, scale[k], shift[k] (fp32) -> y = relu(conv(x, w) * scale + shift)
extern const CudnnGraphDef kConvScaleShiftReluGraph;

// SEAM_PROLOGUE_CONV_GENSTATS: x, scale[c], shift[c] (io dtype: cuDNN builds it for fp16 only), w
// -> y = conv(relu(x * scale + shift), w) and sum / sq_sum[k] (fp32) of y. Pointers::scale and
// ::shift point at the io-dtype copies.
extern const CudnnGraphDef kSeamPrologueConvGenstatsGraph;

// SEAM_PROLOGUE_WGRAD: x, scale[c], shift[c] (io dtype, as above), dy -> dw = wgrad(relu(x * scale +
// shift), dy), the filter gradient in KRSC.
extern const CudnnGraphDef kSeamPrologueWgradGraph;

}  // namespace kiln::cuda

#pragma once
// Shared by the CUDA ops that run convolutions (conv, CBR): the cuDNN problem of an op's tensors.
#include "runtime/cuda/cudnn_graphs.h"
#include "runtime/op_call.h"

namespace kiln::cuda {

// x: (N,H,W,C) activation, w: (K,R,S,C) filter; stride/padding from the op's attributes.
ConvProblem conv_problem(const OpCall& call, const TensorArg& x, const TensorArg& w);

// Rounds up to 256 bytes, the alignment every carved workspace piece keeps.
inline size_t workspace_align(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace kiln::cuda

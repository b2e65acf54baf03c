#pragma once
// The pieces of the convolution graphs that other families' cuDNN graphs build on (CBR's seam
// graphs differ from the conv family's only in the input the convolution reads): the weight
// gradient into the filter's layout, and an output with its batch statistics. Defined in
// conv_cudnn_graphs_cuda.cpp.
//
// Includes runtime/cuda/cudnn_graph_defs.h, and with it cudnn_frontend.h: only the families'
// *_cudnn_graphs_cuda.cpp files include this header.
#include "runtime/cuda/cudnn_graph_defs.h"

namespace kiln::cuda {

// The gradient dy of the problem's output (UID_DY, NHWC), added to `g`.
TensorPtr conv_dy(fe::graph::Graph& g, const ConvProblem& p);

// dw = wgrad(dy, x) of `p` (its padding and stride, no dilation), made the output UID_DW in the
// filter's KRSC layout.
void add_wgrad_into_krsc(fe::graph::Graph& g, const ConvProblem& p, const TensorPtr& dy, const TensorPtr& x);

// Makes the convolution result y the NHWC output UID_Y and adds its per-channel sum and sum of
// squares (genstats, fp32) as the outputs UID_SUM and UID_SQ_SUM.
void add_output_with_genstats(fe::graph::Graph& g, const ConvProblem& p, const TensorPtr& y);

}  // namespace kiln::cuda

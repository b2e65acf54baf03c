// CBR's cuDNN graph: its tensors and nodes, built from the toolkit of
// runtime/cuda/cudnn_graph_defs.h, which includes cudnn_frontend.h: only this file of the family
// does.
#include "ops/cbr/cbr_cudnn_graphs_cuda.h"

#include "runtime/cuda/cudnn_graph_defs.h"

namespace kiln::cuda {
namespace {

void define_scale_shift_relu(const ConvProblem& p, fe::graph::Graph& g) {
  auto conv = conv_fprop(g, conv_x(g, p), conv_w(g, p), p);  // virtual, fp32 (intermediate dtype)
  auto scale = g.tensor(per_channel("scale", UID_SCALE, p.k));
  auto shift = g.tensor(per_channel("shift", UID_SHIFT, p.k));
  auto scaled = g.pointwise(conv, scale, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL));
  auto shifted = g.pointwise(scaled, shift, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
  auto y = g.pointwise(shifted, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
  make_output_nhwc(y, UID_Y, p.n, p.k, p.ho, p.wo);
}

}  // namespace

const CudnnGraphDef kConvScaleShiftReluGraph{"CONV_SCALE_SHIFT_RELU", define_scale_shift_relu};

}  // namespace kiln::cuda

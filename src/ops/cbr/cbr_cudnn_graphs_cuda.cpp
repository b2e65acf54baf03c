// CBR's cuDNN graphs: their tensors and nodes, built from the toolkit of
// runtime/cuda/cudnn_graph_defs.h and the conv family's nodes (ops/conv/conv_graph_nodes_cuda.h),
// which include cudnn_frontend.h: only this file of the family does.
#include "ops/cbr/cbr_cudnn_graphs_cuda.h"

#include "ops/conv/conv_graph_nodes_cuda.h"

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

// The per-channel prologue operands in the io dtype (the graph's default): cuDNN 9.19 offers no
// engine for this pattern with fp32 ones.
TensorPtr io_channels(fe::graph::Graph& g, const char* name, int64_t uid, int64_t c) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({1, c, 1, 1}).set_stride(
      {c, 1, c, c}));
}

// relu(x * scale + shift) of the problem's input, virtual.
TensorPtr applied_input(const ConvProblem& p, fe::graph::Graph& g) {
  using fe::graph::Pointwise_attributes;
  auto scaled = g.pointwise(conv_x(g, p), io_channels(g, "in_scale", UID_SCALE, p.c),
                            Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL));
  auto shifted = g.pointwise(scaled, io_channels(g, "in_shift", UID_SHIFT, p.c),
                             Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
  return g.pointwise(shifted, Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
}

// The conv family's CONV_FPROP_GENSTATS and CONV_WGRAD graphs with the applied input in place of x.
void define_seam_prologue_genstats(const ConvProblem& p, fe::graph::Graph& g) {
  add_output_with_genstats(g, p, conv_fprop(g, applied_input(p, g), conv_w(g, p), p));
}

void define_seam_prologue_wgrad(const ConvProblem& p, fe::graph::Graph& g) {
  auto dy = conv_dy(g, p);
  add_wgrad_into_krsc(g, p, dy, applied_input(p, g));
}

}  // namespace

const CudnnGraphDef kSeamPrologueWgradGraph{"SEAM_PROLOGUE_WGRAD", define_seam_prologue_wgrad};
const CudnnGraphDef kSeamPrologueConvGenstatsGraph{"SEAM_PROLOGUE_CONV_GENSTATS", define_seam_prologue_genstats};
const CudnnGraphDef kConvScaleShiftReluGraph{"CONV_SCALE_SHIFT_RELU", define_scale_shift_relu};

}  // namespace kiln::cuda

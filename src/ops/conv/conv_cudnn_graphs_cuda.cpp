// The convolution family's cuDNN graphs: their tensors and nodes, built from the toolkit of
// runtime/cuda/cudnn_graph_defs.h (which includes cudnn_frontend.h: only this file of the family
// does).
#include "ops/conv/conv_cudnn_graphs_cuda.h"

#include "runtime/cuda/cudnn_graph_defs.h"

namespace kiln::cuda {
namespace {

// The gradient dy of the problem's output (UID_DY, NHWC), added to `g`.
TensorPtr conv_dy(fe::graph::Graph& g, const ConvProblem& p) {
  return g.tensor(nhwc("dy", UID_DY, p.n, p.k, p.ho, p.wo));
}

// dw = wgrad(dy, x) of `p` (its window), made the output UID_DW in the filter's KRSC layout
// (K, R, S, C/groups).
void add_wgrad_into_krsc(fe::graph::Graph& g, const ConvProblem& p, const TensorPtr& dy, const TensorPtr& x) {
  make_output_krsc(g.conv_wgrad(dy, x, with_window(fe::graph::Conv_wgrad_attributes(), p)), UID_DW, p);
}

// Makes the convolution result y the NHWC output UID_Y and adds its per-channel sum and sum of
// squares (genstats, fp32) as the outputs UID_SUM and UID_SQ_SUM.
void add_output_with_genstats(fe::graph::Graph& g, const ConvProblem& p, const TensorPtr& y) {
  make_output_nhwc(y, UID_Y, p.n, p.k, p.ho, p.wo);
  auto [sum, sq_sum] = g.genstats(y, fe::graph::Genstats_attributes().set_name("stats"));
  make_output_channels(sum, UID_SUM, p.k);
  make_output_channels(sq_sum, UID_SQ_SUM, p.k);
}

void define_fprop(const ConvProblem& p, fe::graph::Graph& g) {
  auto y = conv_fprop(g, conv_x(g, p), conv_w(g, p), p);
  make_output_nhwc(y, UID_Y, p.n, p.k, p.ho, p.wo);
}

void define_fprop_genstats(const ConvProblem& p, fe::graph::Graph& g) {
  add_output_with_genstats(g, p, conv_fprop(g, conv_x(g, p), conv_w(g, p), p));
}

// The statistics as two ADD reductions over N, H and W, which cuDNN's runtime-fusion engines
// compile into the convolution's epilogue: they build in bf16 and fp32, where genstats does not
// (docs/cudnn-support.md).
void define_fprop_sums(const ConvProblem& p, fe::graph::Graph& g) {
  auto y = conv_fprop(g, conv_x(g, p), conv_w(g, p), p);
  make_output_nhwc(y, UID_Y, p.n, p.k, p.ho, p.wo);
  auto channel_sum = [&](const TensorPtr& t, int64_t uid) {
    auto sum = g.reduction(t, fe::graph::Reduction_attributes().set_mode(fe::ReductionMode_t::ADD).set_compute_data_type(
                                  fe::DataType_t::FLOAT));
    make_output_channels(sum, uid, p.k);
  };
  channel_sum(y, UID_SUM);
  channel_sum(g.pointwise(y, y, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL)), UID_SQ_SUM);
}

void define_dgrad(const ConvProblem& p, fe::graph::Graph& g) {
  auto dy = conv_dy(g, p);
  auto dx = g.conv_dgrad(dy, conv_w(g, p), with_window(fe::graph::Conv_dgrad_attributes(), p));
  make_output_nhwc(dx, UID_DX, p.n, p.c, p.h, p.w);
}

void define_wgrad(const ConvProblem& p, fe::graph::Graph& g) {
  auto dy = conv_dy(g, p);  // dy before x, in the order the graph has always been built
  add_wgrad_into_krsc(g, p, dy, conv_x(g, p));
}

}  // namespace

const CudnnGraphDef kConvFpropGraph{"CONV_FPROP", define_fprop};
const CudnnGraphDef kConvFpropGenstatsGraph{"CONV_FPROP_GENSTATS", define_fprop_genstats};
const CudnnGraphDef kConvFpropSumsGraph{"CONV_FPROP_SUMS", define_fprop_sums};
const CudnnGraphDef kConvDgradGraph{"CONV_DGRAD", define_dgrad};
const CudnnGraphDef kConvWgradGraph{"CONV_WGRAD", define_wgrad};

}  // namespace kiln::cuda

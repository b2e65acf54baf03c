// StochasticDepth: the kiln node the layout patterns make of a training-mode export's per-sample
// Bernoulli mask (import/onnx_layout_patterns.h), torchvision's StochasticDepth(p, "row"): kiln's
// stochastic_depth layer, which drops whole samples of the residual branch in training and is the
// identity in evaluation.
#include <fmt/format.h>

#include "import/onnx_op_table.h"
#include "import/onnx_patterns.h"

namespace kiln::onnx_import {
namespace {

void check_stochastic_depth(const OnnxNode& node, ImportContext&, std::vector<std::string>& problems) {
  const float p = float_attribute(node, "p", 0.f);
  if (!(p >= 0.f && p < 1.f))
    problems.push_back(fmt::format("{}: it keeps each sample with probability {}; kiln's stochastic depth drops "
                                   "with a probability in [0, 1)", node_label(node), 1.f - p));
}

void map_stochastic_depth(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue x = ctx.input(node, 0);
  const float p = float_attribute(node, "p", 0.f);
  if (p == 0.f) {  // nothing dropped: no layer
    ctx.set(node.outputs.at(0), x);
    return;
  }
  ctx.from(x).stochastic_depth(p, ctx.layer_name(node));
  ctx.produce(node, x.form, x.channels, x.one_by_one);
}

}  // namespace

const std::vector<OnnxOp> kStochasticDepthOps = {
    {kKilnDomain, "StochasticDepth", nullptr, check_stochastic_depth, map_stochastic_depth},
};

}  // namespace kiln::onnx_import

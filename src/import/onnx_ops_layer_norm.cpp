// LayerNorm: LayerNormalization over the last axis of flat rows (N, F), and over a map's channels
// as the kiln node the layout patterns make of Transpose -> LayerNormalization -> Transpose
// (import/onnx_layout_patterns.h). kiln's layer_norm has PyTorch's learned weight and bias
// (elementwise_affine), taken from Scale and B under their initializers' names.
#include <fmt/format.h>

#include "import/onnx_op_table.h"
#include "import/onnx_patterns.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

std::vector<std::string> layer_norm_parameters(const OnnxNode& node, ImportContext&) {
  return {node.input(1), node.input(2)};
}

void check_layer_norm(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  ctx.check_weight(node, 1, "its scale", problems);
  if (node.input(2).empty())
    problems.push_back(fmt::format("{} has no bias (input 2); kiln's layer_norm learns a weight and a bias "
                                   "(nn.LayerNorm's elementwise_affine): export it with its bias", node_label(node)));
  else
    ctx.check_weight(node, 2, "its bias", problems);
  const int64_t axis = int_attribute(node, "axis", -1);
  const bool over_channels = node.domain == kKilnDomain;  // axis -1 of the channels-last map
  if (axis != -1 && !(over_channels ? axis == 3 : axis == 1))
    problems.push_back(attribute_problem(node, "axis", std::to_string(axis),
                                         "kiln normalizes over the last axis only (a map's channels, flat features)"));
  const float eps = float_attribute(node, "epsilon", 1e-5f);
  if (!(eps > 0.f))
    problems.push_back(attribute_problem(node, "epsilon", fmt::format("{}", eps), "kiln's layer_norm needs eps > 0"));
  for (size_t k = 1; k < node.outputs.size(); ++k)
    if (!node.outputs[k].empty() && (!ctx.readers(node.outputs[k]).empty() || ctx.is_output(node.outputs[k])))
      problems.push_back(fmt::format("{}: its output {} ('{}', a statistic) is read by the graph; kiln's layer_norm "
                                     "gives the normalized values only", node_label(node), k, node.outputs[k]));
}

void map_layer_norm(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue& x = ctx.input(node, 0);
  const bool over_channels = node.domain == kKilnDomain;
  if (x.form != (over_channels ? Form::Map : Form::Rows))
    fail("'{}': {} normalizes the last axis of a feature map (N, C, H, W), its width: kiln's layer_norm normalizes a "
         "map's channels (Transpose (0, 2, 3, 1), LayerNormalization, Transpose (0, 3, 1, 2), as PyTorch's permutes "
         "write it) or flat features", ctx.path(), node_label(node));
  const OnnxTensor &scale = ctx.weight(node, 1, "its scale"), &bias = ctx.weight(node, 2, "its bias");
  if (scale.dims.size() != 1 || bias.dims != scale.dims || (x.channels > 0 && scale.dims[0] != x.channels))
    fail("'{}': {}'s scale '{}' is {} and bias '{}' {}; kiln's layer_norm takes two vectors of the input's {} "
         "channels", ctx.path(), node_label(node), scale.name, shape_str(scale.dims), bias.name, shape_str(bias.dims),
         x.channels);
  const std::string& name = ctx.layer_name(node);
  ctx.from(x).layer_norm(decimal_attribute(node, "epsilon", 1e-5f), name);
  ctx.add_weight(node, name + ".weight", named_tensor(scale));
  ctx.add_weight(node, name + ".bias", named_tensor(bias));
  ctx.produce(node, x.form, scale.dims[0], x.one_by_one);
}

}  // namespace

const std::vector<OnnxOp> kLayerNormOps = {
    {"", "LayerNormalization", layer_norm_parameters, check_layer_norm, map_layer_norm},
    {kKilnDomain, "LayerNorm2d", layer_norm_parameters, check_layer_norm, map_layer_norm},
};

}  // namespace kiln::onnx_import

// GroupNorm: the kiln node the layout patterns make of Reshape (0, g, -1) -> InstanceNormalization
// -> Reshape -> Mul -> Add (import/onnx_layout_patterns.h), nn.GroupNorm as exporters write it below
// opset 18. The instance normalization's own scale and bias must be ones and zeros (PyTorch's
// exporter and kiln's make them so: the learned affine is the Mul and Add); the weight and bias,
// (C, 1, 1) on a map or (C) on flat rows, are the layer's (C) under their initializers' names.
#include <fmt/format.h>

#include <utility>

#include "import/onnx_op_table.h"
#include "import/onnx_patterns.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

std::vector<std::string> group_norm_parameters(const OnnxNode& node, ImportContext&) {
  return {node.input(1), node.input(2)};
}

// Whether stored tensor `name` holds `value` everywhere.
bool all_equal(ImportContext& ctx, const std::string& name, double value) {
  const OnnxTensor* t = ctx.stored(name);
  if (!t || !t->floating) return false;
  for (const double v : t->values())
    if (v != value) return false;
  return true;
}

void check_group_norm(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  ctx.check_weight(node, 1, "its weight (the Mul's)", problems);
  ctx.check_weight(node, 2, "its bias (the Add's)", problems);
  if (!all_equal(ctx, node.input(3), 1.0) || !all_equal(ctx, node.input(4), 0.0))
    problems.push_back(fmt::format("{}: the InstanceNormalization of its groups has a scale or bias other than ones and "
                                   "zeros ('{}', '{}'); kiln's group_norm learns one weight and bias per channel (the Mul "
                                   "and Add after it), as nn.GroupNorm", node_label(node), node.input(3), node.input(4)));
  const float eps = float_attribute(node, "epsilon", 1e-5f);
  if (!(eps > 0.f))
    problems.push_back(attribute_problem(node, "epsilon", fmt::format("{}", eps), "kiln's group_norm needs eps > 0"));
}

void map_group_norm(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue& x = ctx.input(node, 0);
  const int64_t groups = int_attribute(node, "groups", 1);
  const OnnxTensor &weight = ctx.weight(node, 1, "its weight"), &bias = ctx.weight(node, 2, "its bias");
  const Shape per_channel = x.form == Form::Map ? Shape{x.channels, 1, 1} : Shape{x.channels};
  if (x.channels < 1 || x.channels % groups != 0 || weight.dims != per_channel || bias.dims != per_channel)
    fail("'{}': {} normalizes {} in {} groups with weight '{}' {} and bias '{}' {}; kiln's group_norm takes groups "
         "dividing the channels C and a weight and bias of shape {}", ctx.path(), node_label(node),
         x.form == Form::Map ? fmt::format("a map of {} channels", x.channels) : fmt::format("{} features", x.channels),
         groups, weight.name, shape_str(weight.dims), bias.name, shape_str(bias.dims), shape_str(per_channel));
  const std::string& name = ctx.layer_name(node);
  ctx.from(x).group_norm(int(groups), decimal_attribute(node, "epsilon", 1e-5f), name);
  // nn.GroupNorm's weight and bias are (C): the file's (C, 1, 1) is their broadcast form.
  for (const auto& [field, t] : {std::pair<const char*, const OnnxTensor*>{".weight", &weight}, {".bias", &bias}}) {
    NamedTensor v = named_tensor(*t);
    v.shape = {x.channels};
    ctx.add_weight(node, name + field, std::move(v));
  }
  ctx.produce(node, x.form, x.channels, x.one_by_one);
}

}  // namespace

const std::vector<OnnxOp> kGroupNormOps = {
    {kKilnDomain, "GroupNorm", group_norm_parameters, check_group_norm, map_group_norm},
};

}  // namespace kiln::onnx_import

// LayerScale: the kiln node the layout patterns make of a Mul by a stored (C, 1, 1) or (C) tensor
// (import/onnx_layout_patterns.h), ConvNeXt's `self.layer_scale * x`. Its parameter is
// `<layer>.layer_scale`, the layer named after the initializer's module (features.1.0.layer_scale
// names layer features.1.0, as kiln's ConvNeXt names its block), in the initializer's shape.
#include <fmt/format.h>

#include "import/onnx_op_table.h"
#include "import/onnx_patterns.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

std::vector<std::string> layer_scale_parameters(const OnnxNode& node, ImportContext&) { return {node.input(1)}; }

void check_layer_scale(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  ctx.check_weight(node, 1, "its scale", problems);
}

void map_layer_scale(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue& x = ctx.input(node, 0);
  const OnnxTensor& gamma = ctx.weight(node, 1, "its scale");
  // (C, 1, 1) broadcasts over a map's positions, (C) over rows' features; (C) on a map would scale
  // its width (ONNX broadcasts from the last axis), which kiln has no layer for.
  const bool fits = x.form == Form::Map ? gamma.dims.size() == 3 : gamma.dims.size() == 1;
  if (!fits || (x.channels > 0 && gamma.dims[0] != x.channels))
    fail("'{}': {} multiplies {} by '{}' of shape {}; kiln scales each channel: a (C, 1, 1) tensor on a map of C "
         "channels, a (C) tensor on flat rows of C features", ctx.path(), node_label(node),
         x.form == Form::Map ? fmt::format("a map of {} channels", x.channels) : std::string("flat features"),
         gamma.name, shape_str(gamma.dims));
  const std::string& name = ctx.layer_name(node);
  ctx.from(x).layer_scale(1.f, name);  // the value is the file's
  ctx.add_weight(node, name + ".layer_scale", named_tensor(gamma));
  ctx.produce(node, x.form, gamma.dims[0], x.one_by_one);
}

}  // namespace

const std::vector<OnnxOp> kLayerScaleOps = {
    {kKilnDomain, "LayerScale", layer_scale_parameters, check_layer_scale, map_layer_scale},
};

}  // namespace kiln::onnx_import

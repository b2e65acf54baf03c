// The Flatten layer's export (its lowering, src/compile/flatten_layer.cpp, emits no ops, so it has
// no family folder). ONNX values are NCHW, so a feature map flattens in PyTorch's C,H,W order, while
// kiln's runs H,W,C: when every consumer is a linear layer, their columns are reordered to match
// (linear_export.cpp); else the map is first transposed to NHWC, so that any other consumer gets the
// values in kiln's order. No parameters.
#include "export/flatten_export.h"

#include "export/onnx_layer_writer.h"

namespace kiln {

Shape onnx_chw_flattened_map(const ExportedGraph& graph, int flatten) {
  const Layer& l = graph.layers[size_t(flatten)];
  const Shape& map = graph.layers[size_t(l.inputs.at(0))].out_shape;
  if (map.size() != 4 || map[1] * map[2] == 1) return {};
  for (int c : graph.consumers[size_t(flatten)])
    if (graph.layers[size_t(c)].kind != LayerKind::Linear) return {};
  return {map[1], map[2], map[3]};
}

namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  const std::string& x = out.input(layer);
  const Shape& map = out.layer(l.inputs.at(0)).out_shape;
  if (map.size() != 4) return x;  // already (N, F)
  const onnx_export::Attribute axis = onnx_export::Attribute::integer("axis", 1);
  if (map[1] * map[2] == 1 || !onnx_chw_flattened_map(out.graph(), layer).empty())
    return out.node("Flatten", {x}, l.name, {axis});
  const std::string nhwc =
      out.node("Transpose", {x}, l.name + ":nhwc", {onnx_export::Attribute::integers("perm", {0, 2, 3, 1})});
  return out.node("Flatten", {nhwc}, l.name, {axis});
}

}  // namespace

extern const LayerExport kFlattenExport{LayerKind::Flatten, onnx, nullptr};

}  // namespace kiln

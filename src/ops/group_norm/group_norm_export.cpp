// GroupNorm's export. ONNX opset 17 has no GroupNormalization (it arrives in 18), so the layer is
// written as PyTorch's exporter wrote nn.GroupNorm at those opsets, on the NCHW graph: x reshaped
// to (N, groups, -1), InstanceNormalization of that (each (sample, group) row over its elements,
// scale ones, bias zeros, the layer's epsilon), reshaped back to x's shape, then Mul by the weight
// and Add of the bias, shaped (C, 1, 1) so that they broadcast over a map's height and width (C
// for flat (N, C) features). The shapes are Constant nodes (the graph holds float initializers
// only); their 0 keeps the batch dimension symbolic. state_dict: weight and bias as they are.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {
namespace {

using A = onnx_export::Attribute;

// A Constant node holding a 1-D int64 tensor.
std::string int64s(OnnxLayerWriter& out, const std::string& name, std::vector<int64_t> values) {
  return out.node("Constant", {}, name, {A::integers("value_ints", std::move(values))});
}

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  const GroupNormAttrs& a = attrs_of<GroupNormAttrs>(l);
  const Shape& s = l.out_shape;  // kiln's NHWC, or (N, C)
  const int64_t c = s.back();
  const bool map = s.size() == 4;
  const std::vector<int64_t> nchw = map ? std::vector<int64_t>{0, c, s[1], s[2]} : std::vector<int64_t>{0, c};
  const Shape affine = map ? Shape{c, 1, 1} : Shape{c};

  const std::string rows = out.node(
      "Reshape", {out.input(layer), int64s(out, l.name + ":group_rows_shape", {0, a.groups, -1})}, l.name + ":group_rows");
  // Named beside the layer's weight (PyTorch has no such tensor: its exporter made them as constants).
  const std::string ones = out.weight(l.name + ".instance_norm_scale", {a.groups}, std::vector<float>(size_t(a.groups), 1.f));
  const std::string zeros = out.weight(l.name + ".instance_norm_bias", {a.groups}, std::vector<float>(size_t(a.groups), 0.f));
  const std::string normalized =
      out.node("InstanceNormalization", {rows, ones, zeros}, l.name + ":normalized", {A::real("epsilon", float(a.eps))});
  const std::string back =
      out.node("Reshape", {normalized, int64s(out, l.name + ":map_shape", nchw)}, l.name + ":normalized_map");
  const std::string weight = out.weight(l.name + ".weight", affine, out.read(l.name + ".weight"));
  const std::string bias = out.weight(l.name + ".bias", affine, out.read(l.name + ".bias"));
  return out.node("Add", {out.node("Mul", {back, weight}, l.name + ":scaled"), bias}, l.name);
}

void torch_params(const ExportedGraph& graph, int layer, std::vector<TorchParam>& params) {
  const std::string& name = graph.layers[size_t(layer)].name;
  params.push_back(TorchParam::as_is(name + ".weight"));
  params.push_back(TorchParam::as_is(name + ".bias"));
}

}  // namespace

extern const LayerExport kGroupNormExport{LayerKind::GroupNorm, onnx, torch_params};

}  // namespace kiln

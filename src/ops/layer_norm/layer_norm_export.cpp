// LayerNorm's export: ONNX LayerNormalization (opset 17) over the last axis with the layer's epsilon,
// its weight and bias as Scale and B. The exported graph is NCHW, so a feature map's channels are
// brought last and back: Transpose(0, 2, 3, 1) -> LayerNormalization(axis = -1) -> Transpose(0, 3,
// 1, 2), PyTorch's own permute -> nn.LayerNorm -> permute (ConvNeXt's; torchvision's LayerNorm2d
// writes the same); flat rows (N, F) need neither. PyTorch's state_dict holds weight and bias as
// they are.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  const Shape c = {l.out_shape.back()};
  const std::string weight = out.weight(l.name + ".weight", c, out.read(l.name + ".weight"));
  const std::string bias = out.weight(l.name + ".bias", c, out.read(l.name + ".bias"));
  const std::vector<onnx_export::Attribute> attributes = {
      onnx_export::Attribute::integer("axis", -1), onnx_export::Attribute::real("epsilon", float(attrs_of<LayerNormAttrs>(l).eps))};
  if (l.out_shape.size() != 4) return out.node("LayerNormalization", {out.input(layer), weight, bias}, l.name, attributes);
  const std::string nhwc =
      out.node("Transpose", {out.input(layer)}, l.name + ":nhwc", {onnx_export::Attribute::integers("perm", {0, 2, 3, 1})});
  const std::string normalized = out.node("LayerNormalization", {nhwc, weight, bias}, l.name + ":normalized", attributes);
  return out.node("Transpose", {normalized}, l.name, {onnx_export::Attribute::integers("perm", {0, 3, 1, 2})});
}

void torch_params(const ExportedGraph& graph, int layer, std::vector<TorchParam>& params) {
  const std::string& name = graph.layers[size_t(layer)].name;
  params.push_back(TorchParam::as_is(name + ".weight"));
  params.push_back(TorchParam::as_is(name + ".bias"));
}

}  // namespace

extern const LayerExport kLayerNormExport{LayerKind::LayerNorm, onnx, torch_params};

}  // namespace kiln

// The linear layer's export: a Gemm node (transB: the weight is [out, in], as PyTorch's). A layer
// reading a flattened feature map takes its columns in the flatten's order: C,H,W in PyTorch's
// state_dict always (torch_layout::flattened_maps, as load_torch_weights reads them), and in ONNX
// where the Flatten node runs in that order (src/export/flatten_export.h). A layer over a feature
// map (nn.Linear at every position of a channels-last map, ConvNeXt's) is, on ONNX's NCHW graph, a
// 1x1 Conv whose (out, in, 1, 1) filter holds the same matrix.
#include "export/flatten_export.h"
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"
#include "formats/torch/torch_layouts.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  const std::string weight = l.name + ".weight";
  const Shape shape = out.tensor_shape(weight);  // (out, in)
  std::vector<float> w = out.read(weight);
  const int in = l.inputs.at(0);
  if (out.layer(in).out_shape.size() == 4) {
    std::vector<std::string> inputs = {out.input(layer), out.weight(weight, {shape[0], shape[1], 1, 1}, std::move(w))};
    if (attrs_of<LinearAttrs>(l).bias)
      inputs.push_back(out.weight(l.name + ".bias", {shape[0]}, out.read(l.name + ".bias")));
    return out.node("Conv", std::move(inputs), l.name, {onnx_export::Attribute::integers("kernel_shape", {1, 1})});
  }
  const Shape map = out.layer(in).kind == LayerKind::Flatten ? onnx_chw_flattened_map(out.graph(), in) : Shape{};
  if (!map.empty()) w = torch_layout::hwc_columns_to_chw(w, shape[0], map);
  std::vector<std::string> inputs = {out.input(layer), out.weight(weight, shape, std::move(w))};
  if (attrs_of<LinearAttrs>(l).bias)
    inputs.push_back(out.weight(l.name + ".bias", {shape[0]}, out.read(l.name + ".bias")));
  return out.node("Gemm", std::move(inputs), l.name, {onnx_export::Attribute::integer("transB", 1)});
}

void torch_params(const ExportedGraph& graph, int layer, std::vector<TorchParam>& params) {
  const Layer& l = graph.layers[size_t(layer)];
  const std::string weight = l.name + ".weight";
  const std::map<std::string, Shape> flattened = torch_layout::flattened_maps(graph.graph);
  const auto map = flattened.find(weight);
  params.push_back(map == flattened.end() ? TorchParam::as_is(weight) : TorchParam::flattened_columns(weight, map->second));
  if (attrs_of<LinearAttrs>(l).bias) params.push_back(TorchParam::as_is(l.name + ".bias"));
}

}  // namespace

extern const LayerExport kLinearExport{LayerKind::Linear, onnx, torch_params};

}  // namespace kiln

// LayerScale's export: ONNX Mul(layer_scale, x), as torchvision writes `self.layer_scale * x`. The
// exported graph is NCHW, so the parameter's (C, 1, 1) broadcasts over a map's height and width
// and its (C) over flat rows (N, C) by ONNX's multidirectional broadcasting, as PyTorch's does; the
// initializer is the parameter as it is. The state_dict holds `<layer>.layer_scale` in that same
// shape.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  const std::string gamma = l.name + ".layer_scale";
  const std::string scale = out.weight(gamma, out.tensor_shape(gamma), out.read(gamma));
  return out.node("Mul", {scale, out.input(layer)}, l.name);
}

void torch_params(const ExportedGraph& graph, int layer, std::vector<TorchParam>& params) {
  params.push_back(TorchParam::as_is(graph.layers[size_t(layer)].name + ".layer_scale"));
}

}  // namespace

extern const LayerExport kLayerScaleExport{LayerKind::LayerScale, onnx, torch_params};

}  // namespace kiln

// The conv_bn layer's export: Conv -> BatchNorm, under the names of the layers it was fused from.
// kiln applies the normalization in the block end that reads it (bn_add_relu); ONNX computes it
// here, so the block end's export adds and rectifies only.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"
#include "ir/fused_layer_kinds.h"
#include "ops/conv/conv_export.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  return onnx_conv_bn(out, l, l.conv_name, l.bn_name, attrs_of<BatchNormAttrs>(l), out.input(layer), l.name + ":bn");
}

void torch_params(const ExportedGraph& graph, int layer, std::vector<TorchParam>& params) {
  fused_conv_bn_torch_params(graph.layers[size_t(layer)], params);
}

}  // namespace

extern const LayerExport kConvBnExport{fused_layer::ConvBN, onnx, torch_params};

}  // namespace kiln

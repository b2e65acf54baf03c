// The conv_bn_act layer's export: its convolution and BatchNorm under the names of the layers it was
// fused from (folded into one Conv node, or Conv and BatchNormalization), then its activation's
// nodes, as the unfused layers export.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"
#include "ir/fused_layer_kinds.h"
#include "ops/activation/activation_export.h"
#include "ops/conv/conv_export.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  const ConvBnActAttrs& a = attrs_of<ConvBnActAttrs>(l);
  const std::string normalized =
      onnx_conv_bn(out, l, l.conv_name, l.bn_name, a.bn, out.input(layer), l.name + ":bn");
  if (a.relu) return out.node("Relu", {normalized}, l.name);
  write_activation(out, a.act.activation, a.act.alpha, normalized, l.name);
  return l.name;
}

void torch_params(const ExportedGraph& graph, int layer, std::vector<TorchParam>& params) {
  fused_conv_bn_torch_params(graph.layers[size_t(layer)], params);
}

}  // namespace

extern const LayerExport kConvBnActExport{fused_layer::ConvBnAct, onnx, torch_params};

}  // namespace kiln

// The CBR layer's export: its convolution and BatchNorm under the names of the layers it was fused
// from (folded into one Conv node, or Conv and BatchNormalization), then a Relu node. A CBR whose
// BatchNorm + ReLU its consumers apply (CompileOptions::fuse_seams) exports as any other: the seam
// is how kiln runs it, not what it computes.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"
#include "ops/conv/conv_export.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  const std::string normalized =
      onnx_conv_bn(out, l, l.conv_name, l.bn_name, attrs_of<BatchNormAttrs>(l), out.input(layer), l.name + ":bn");
  return out.node("Relu", {normalized}, l.name);
}

void torch_params(const ExportedGraph& graph, int layer, std::vector<TorchParam>& params) {
  fused_conv_bn_torch_params(graph.layers[size_t(layer)], params);
}

}  // namespace

extern const LayerExport kCbrExport{LayerKind::CBR, onnx, torch_params};

}  // namespace kiln

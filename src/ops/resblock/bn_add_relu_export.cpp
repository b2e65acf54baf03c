// The bn_add_relu layer's export: Add and Relu. Both inputs come normalized: a conv_bn layer's
// export writes its BatchNorm (conv_bn_export.cpp), and an identity shortcut is normalized already.
// No parameters of its own (its BatchNorms' are their conv_bn layers').
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"
#include "ir/fused_layer_kinds.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  return out.node("Relu", {out.node("Add", {out.input(layer, 0), out.input(layer, 1)}, l.name + ":add")}, l.name);
}

}  // namespace

extern const LayerExport kBnAddReluExport{fused_layer::BnAddRelu, onnx, nullptr};

}  // namespace kiln

// The ReLU layer's export: a Relu node. No parameters.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter& out, int layer) { return out.node("Relu", {out.input(layer)}, out.layer(layer).name); }

}  // namespace

extern const LayerExport kReluExport{LayerKind::ReLU, onnx, nullptr};

}  // namespace kiln

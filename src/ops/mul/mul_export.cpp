// Mul's export: an ONNX Mul of its two inputs in their order. The exported graph is NCHW, so a
// gate is (N, C, 1, 1) there and ONNX's multidirectional broadcasting spreads it over the map's
// height and width as PyTorch does. No parameters.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  return out.node("Mul", {out.input(layer, 0), out.input(layer, 1)}, out.layer(layer).name);
}

}  // namespace

extern const LayerExport kMulExport{LayerKind::Mul, onnx, nullptr};

}  // namespace kiln

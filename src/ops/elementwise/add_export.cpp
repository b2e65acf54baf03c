// The residual add's export: an Add node of its two inputs. No parameters.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  return out.node("Add", {out.input(layer, 0), out.input(layer, 1)}, out.layer(layer).name);
}

}  // namespace

extern const LayerExport kAddExport{LayerKind::Add, onnx, nullptr};

}  // namespace kiln

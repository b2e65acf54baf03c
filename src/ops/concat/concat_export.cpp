// Concat's export: ONNX Concat of its inputs on axis 1 (the exported graph is NCHW). No parameters.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  std::vector<std::string> inputs;
  for (size_t k = 0; k < out.layer(layer).inputs.size(); ++k) inputs.push_back(out.input(layer, k));
  return out.node("Concat", std::move(inputs), out.layer(layer).name, {onnx_export::Attribute::integer("axis", 1)});
}

}  // namespace

extern const LayerExport kConcatExport{LayerKind::Concat, onnx, nullptr};

}  // namespace kiln

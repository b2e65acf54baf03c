// The input layer's export: the graph's input, "input" [N, C, H, W] (kiln's data batch is NHWC;
// ONNX's values are NCHW from here on). No nodes, no parameters.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter&, int) { return onnx_export::kInputName; }

}  // namespace

extern const LayerExport kInputExport{LayerKind::Input, onnx, nullptr};

}  // namespace kiln

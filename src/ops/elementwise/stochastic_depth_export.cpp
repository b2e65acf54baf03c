// The stochastic depth layer's export: the identity in eval mode, as dropout's, so no node; its
// output is its input's value. No parameters.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter& out, int layer) { return out.input(layer); }

}  // namespace

extern const LayerExport kStochasticDepthExport{LayerKind::StochasticDepth, onnx, nullptr};

}  // namespace kiln

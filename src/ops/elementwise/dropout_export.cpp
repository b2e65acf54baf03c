// The dropout layer's export: a Dropout node with its ratio, the identity in eval mode (ONNX's
// training_mode defaults to false), so the file computes what the eval program does and an import
// gets the layer back (kiln::import_onnx maps Dropout to kiln's dropout). No parameters.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"
#include "kiln/layer_graph.h"
#include "kiln/layer_kind_attrs.h"

namespace kiln {
namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  return out.node("Dropout", {out.input(layer), out.scalar(float(attrs_of<DropoutAttrs>(l).p))}, l.name);
}

}  // namespace

extern const LayerExport kDropoutExport{LayerKind::Dropout, onnx, nullptr};

}  // namespace kiln

// The stochastic depth layer's export: the identity in eval mode, so an Identity node named after
// the layer, listed with its probability and mode in the model's metadata (stochastic_depth_onnx.h)
// so that kiln::import_onnx gets the layer back. No parameters.
#include <nlohmann/json.hpp>

#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"
#include "kiln/layer_graph.h"
#include "kiln/layer_kind_attrs.h"
#include "ops/elementwise/stochastic_depth_onnx.h"

namespace kiln {
namespace {

// The name the node has in the file: the exporter names the node giving the model's result
// "logits", and a layer's own node named "logits" gives the name up as "logits:layer"
// (onnx_graph_builder.cpp's name_output), after every layer is written.
std::string final_node_name(OnnxLayerWriter& out, int layer) {
  const std::string& name = out.layer(layer).name;
  if (size_t(layer) + 1 == out.graph().layers.size()) return onnx_export::kOutputName;
  if (name == onnx_export::kOutputName) return name + ":layer";
  return name;
}

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  const std::string value = out.node("Identity", {out.input(layer)}, l.name);
  std::string& listed = out.metadata(kStochasticDepthMetadataKey);
  nlohmann::json entries = listed.empty() ? nlohmann::json::object() : nlohmann::json::parse(listed);
  // As a double: the float's exact value, which JSON's shortest round-trip form gives back.
  entries[final_node_name(out, layer)] = {{"p", attrs_of<StochasticDepthAttrs>(l).p},
                                          {"mode", kStochasticDepthRowMode}};
  listed = entries.dump();
  return value;
}

}  // namespace

extern const LayerExport kStochasticDepthExport{LayerKind::StochasticDepth, onnx, nullptr};

}  // namespace kiln

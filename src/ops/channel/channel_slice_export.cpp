// ChannelSlice's export: ONNX Slice of axis 1 (the channels of the NCHW graph, or the features of
// flat rows, which the exporter keeps in kiln's order for any reader but a linear layer), its starts,
// ends and axes int64 tensors made by Constant nodes (value_ints): the exporter's initializers are
// float32 (export/onnx_graph.h). A slice of every channel exports no node. No parameters.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {
namespace {

std::string int64s(OnnxLayerWriter& out, const std::string& name, std::vector<int64_t> values) {
  return out.node("Constant", {}, name, {onnx_export::Attribute::integers("value_ints", std::move(values))});
}

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  const ChannelSliceAttrs& a = attrs_of<ChannelSliceAttrs>(l);
  const int64_t start = a.start, end = int64_t{a.start} + a.count;
  if (start == 0 && end == out.layer(l.inputs.at(0)).out_shape.back()) return out.input(layer);
  return out.node("Slice",
                  {out.input(layer), int64s(out, l.name + ":starts", {start}), int64s(out, l.name + ":ends", {end}),
                   int64s(out, l.name + ":axes", {1})},
                  l.name);
}

}  // namespace

extern const LayerExport kChannelSliceExport{LayerKind::ChannelSlice, onnx, nullptr};

}  // namespace kiln

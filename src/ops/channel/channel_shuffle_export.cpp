// ChannelShuffle's export, as torchvision's channel_shuffle is traced, on the NCHW graph: Reshape to
// (N, g, C / g, H, W) (0 copies the batch), Transpose(0, 2, 1, 3, 4), Reshape back to (N, C, H, W).
// The shapes are int64 tensors made by Constant nodes (value_ints): the exporter's initializers are
// float32 (export/onnx_graph.h). A shuffle that moves no channel exports no node (its output is its
// input's value). No parameters.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {
namespace {

std::string int64s(OnnxLayerWriter& out, const std::string& name, std::vector<int64_t> values) {
  return out.node("Constant", {}, name, {onnx_export::Attribute::integers("value_ints", std::move(values))});
}

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  const Shape& s = l.out_shape;  // N, H, W, C
  const int64_t g = attrs_of<ChannelShuffleAttrs>(l).groups, c = s[3], h = s[1], w = s[2];
  if (g == 1 || g == c) return out.input(layer);
  const std::string grouped = out.node(
      "Reshape", {out.input(layer), int64s(out, l.name + ":grouped_shape", {0, g, c / g, h, w})}, l.name + ":grouped");
  const std::string transposed = out.node("Transpose", {grouped}, l.name + ":transposed",
                                          {onnx_export::Attribute::integers("perm", {0, 2, 1, 3, 4})});
  return out.node("Reshape", {transposed, int64s(out, l.name + ":shape", {0, c, h, w})}, l.name);
}

}  // namespace

extern const LayerExport kChannelShuffleExport{LayerKind::ChannelShuffle, onnx, nullptr};

}  // namespace kiln

// The pooling layers' exports: MaxPool, AveragePool and GlobalAveragePool nodes. No parameters.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {
namespace {

using A = onnx_export::Attribute;

std::vector<A> pool_window(const Layer& l) {
  const PoolAttrs& a = attrs_of<PoolAttrs>(l);
  return window_attributes(a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_top, a.pad_left, a.pad_bottom,
                           a.pad_right);
}

std::string onnx_max(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  return out.node("MaxPool", {out.input(layer)}, l.name, pool_window(l));
}

// kiln, as PyTorch, divides by the window's size, padding included.
std::string onnx_avg(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  std::vector<A> attributes = pool_window(l);
  attributes.push_back(A::integer("count_include_pad", 1));
  return out.node("AveragePool", {out.input(layer)}, l.name, std::move(attributes));
}

// kiln's gives (N, C): ONNX's keeps the 1x1 map, which a Flatten drops.
std::string onnx_global_avg(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  return out.node("Flatten", {out.node("GlobalAveragePool", {out.input(layer)}, l.name + ":map")}, l.name,
                  {A::integer("axis", 1)});
}

}  // namespace

extern const LayerExport kMaxPoolExport{LayerKind::MaxPool, onnx_max, nullptr};
extern const LayerExport kAvgPoolExport{LayerKind::AvgPool, onnx_avg, nullptr};
extern const LayerExport kGlobalAvgPoolExport{LayerKind::GlobalAvgPool, onnx_global_avg, nullptr};

}  // namespace kiln

// The pooling layers' exports: MaxPool, AveragePool and GlobalAveragePool nodes. No parameters.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"
#include "ops/pool/pool_cpu.h"

namespace kiln {
namespace {

using A = onnx_export::Attribute;

// The windows along one axis by ONNX's ceil_mode at opset 17: ceil((in + 2p - k) / s) + 1, with no
// rule dropping a last window that would start in the bottom/right padding (PyTorch's, and kiln's,
// cpu::pool_output_size).
int64_t onnx_ceil_size(int64_t in, int kernel, int stride, int pad) {
  return (in + 2 * pad - kernel + stride - 1) / stride + 1;
}

// ONNX's ceil_mode for a layer in kiln's (PyTorch's) ceil mode on its input. Where ceil mode adds no
// window on either axis the windows are floor mode's, every one inside the padded input: 0 says the
// same. Where it adds one, ONNX's 1 gives the same windows unless PyTorch's rule drops one on the
// other axis, which ONNX's ceil_mode would keep; that pooling has no ONNX form: refused.
int onnx_ceil_mode(OnnxLayerWriter& out, const Layer& l) {
  const PoolAttrs& a = attrs_of<PoolAttrs>(l);
  if (!a.ceil_mode) return 0;
  const Shape& x = out.layer(l.inputs.at(0)).out_shape;  // NHWC; square windows (the layer checks)
  const int k = a.kernel_h, s = a.stride_h, p = a.pad_top;
  bool adds = false, drops = false;
  for (int64_t in : {x.at(1), x.at(2)}) {
    const int64_t kiln = cpu::pool_output_size(in, k, s, p, true);
    adds |= kiln > cpu::pool_output_size(in, k, s, p, false);
    drops |= kiln < onnx_ceil_size(in, k, s, p);
  }
  if (!adds) return 0;
  if (drops)
    fail("{}: on its {}x{} input ceil mode adds a window on one axis, and on the other PyTorch's rule drops the one "
         "that would start in the bottom/right padding, which ONNX's ceil_mode (opset {}) keeps: ONNX has no form of "
         "this pooling; use floor mode, or an input size on which ceil mode drops no window",
         layer_label(l), x.at(1), x.at(2), onnx_export::kOpset);
  return 1;
}

// The window and ONNX's ceil_mode (onnx_ceil_mode).
std::vector<A> pool_window(OnnxLayerWriter& out, const Layer& l) {
  const PoolAttrs& a = attrs_of<PoolAttrs>(l);
  std::vector<A> attributes = window_attributes(a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_top, a.pad_left,
                                                a.pad_bottom, a.pad_right);
  attributes.push_back(A::integer("ceil_mode", onnx_ceil_mode(out, l)));
  return attributes;
}

std::string onnx_max(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  return out.node("MaxPool", {out.input(layer)}, l.name, pool_window(out, l));
}

// kiln, as PyTorch, divides by the window's size with the padding (count_include_pad) or by the input
// cells it holds.
std::string onnx_avg(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  std::vector<A> attributes = pool_window(out, l);
  attributes.push_back(A::integer("count_include_pad", attrs_of<PoolAttrs>(l).count_include_pad ? 1 : 0));
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

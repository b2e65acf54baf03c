// The adaptive average pooling layer's export. ONNX has no adaptive pooling; what it computes is
// written in standard ops by what the sizes make of it (the graph is NCHW):
//  - the input's own size: Identity (kiln runs no op either);
//  - 1x1: GlobalAveragePool (it keeps the N x C x 1 x 1 map, as the layer does);
//  - an input size a multiple of the output size on both axes: AveragePool with kernel = stride =
//    in / out, no padding, every window whole;
//  - else the pooling as the linear map it is: y = A_h x A_w^T, where row i of A_h (out_h x H) holds
//    1 / (its range's rows) over the rows [floor(i H / out_h), ceil((i + 1) H / out_h)) and A_w
//    likewise, since a cell's divisor is its rows times its columns: two MatMuls with constant
//    matrices, x (N, C, H, W) @ A_w^T (W, out_w), then A_h (out_h, H) @ that, broadcast over N and C.
#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"
#include "ops/pool/adaptive_pool_cpu.h"

namespace kiln {
namespace {

using A = onnx_export::Attribute;

// The rows x cols averaging matrix of one axis: out x in with row i holding 1 / (the range's cells)
// over output i's range, or its transpose (in x out) when `transposed`.
std::vector<float> averaging_matrix(int64_t in, int64_t out, bool transposed) {
  std::vector<float> m(size_t(in * out), 0.f);
  for (int64_t i = 0; i < out; ++i) {
    const int64_t lo = cpu::adaptive_start(i, in, out), hi = cpu::adaptive_end(i, in, out);
    for (int64_t k = lo; k < hi; ++k) m[size_t(transposed ? k * out + i : i * in + k)] = 1.f / float(hi - lo);
  }
  return m;
}

std::string onnx_adaptive_avg(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  const Shape& x = out.layer(l.inputs.at(0)).out_shape;  // NHWC
  const int64_t h = x.at(1), w = x.at(2), oh = l.out_shape.at(1), ow = l.out_shape.at(2);
  const std::string& in = out.input(layer);
  if (h == oh && w == ow) return out.node("Identity", {in}, l.name);
  if (oh == 1 && ow == 1) return out.node("GlobalAveragePool", {in}, l.name);
  if (h % oh == 0 && w % ow == 0) {
    const int kh = int(h / oh), kw = int(w / ow);
    std::vector<A> attributes = window_attributes(kh, kw, kh, kw, 0, 0, 0, 0);
    attributes.push_back(A::integer("ceil_mode", 0));
    attributes.push_back(A::integer("count_include_pad", 0));  // no padding: either reads the same
    return out.node("AveragePool", {in}, l.name, std::move(attributes));
  }
  // Names beside the layer's (no PyTorch tensor: the layer has no parameters).
  const std::string cols = out.weight(l.name + ".column_average", {w, ow}, averaging_matrix(w, ow, true));
  const std::string rows = out.weight(l.name + ".row_average", {oh, h}, averaging_matrix(h, oh, false));
  return out.node("MatMul", {rows, out.node("MatMul", {in, cols}, l.name + ":columns")}, l.name);
}

}  // namespace

extern const LayerExport kAdaptiveAvgPoolExport{LayerKind::AdaptiveAvgPool, onnx_adaptive_avg, nullptr};

}  // namespace kiln

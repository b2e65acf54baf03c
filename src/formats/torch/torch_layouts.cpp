#include "formats/torch/torch_layouts.h"

#include "kiln/error.h"

namespace kiln::torch_layout {
namespace {

// Element (k, c, r, s) of a filter at its KRSC and its OIHW index.
template <class Move>
void each_filter_element(const Shape& krsc, Move&& move) {
  const int64_t K = krsc.at(0), R = krsc.at(1), S = krsc.at(2), C = krsc.at(3);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t s = 0; s < S; ++s) move(((k * R + r) * S + s) * C + c, ((k * C + c) * R + r) * S + s);
}

// Column (h, w, c) of every row at its H,W,C and its C,H,W index.
template <class Move>
void each_column(const std::vector<float>& matrix, int64_t rows, const Shape& hwc, Move&& move) {
  const int64_t H = hwc.at(0), W = hwc.at(1), C = hwc.at(2), in = H * W * C;
  if (rows * in != int64_t(matrix.size()))
    fail("internal: a {}-row matrix of {} values does not read a {}x{}x{} map", rows, matrix.size(), H, W, C);
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t c = 0; c < C; ++c) move(o * in + (h * W + w) * C + c, o * in + (c * H + h) * W + w);
}

}  // namespace

std::vector<float> krsc_to_oihw(const std::vector<float>& krsc, const Shape& krsc_shape) {
  std::vector<float> oihw(krsc.size());
  each_filter_element(krsc_shape, [&](int64_t at_krsc, int64_t at_oihw) { oihw[at_oihw] = krsc[at_krsc]; });
  return oihw;
}

std::vector<float> oihw_to_krsc(const std::vector<float>& oihw, const Shape& krsc_shape) {
  std::vector<float> krsc(oihw.size());
  each_filter_element(krsc_shape, [&](int64_t at_krsc, int64_t at_oihw) { krsc[at_krsc] = oihw[at_oihw]; });
  return krsc;
}

std::vector<float> hwc_columns_to_chw(const std::vector<float>& matrix, int64_t rows, const Shape& hwc) {
  std::vector<float> chw(matrix.size());
  each_column(matrix, rows, hwc, [&](int64_t at_hwc, int64_t at_chw) { chw[at_chw] = matrix[at_hwc]; });
  return chw;
}

std::vector<float> chw_columns_to_hwc(const std::vector<float>& matrix, int64_t rows, const Shape& hwc) {
  std::vector<float> out(matrix.size());
  each_column(matrix, rows, hwc, [&](int64_t at_hwc, int64_t at_chw) { out[at_hwc] = matrix[at_chw]; });
  return out;
}

int flatten_read_by(const LayerGraph& graph, int linear) {
  const Layer& l = graph.layers[size_t(linear)];
  if (l.inputs.size() != 1) return -1;
  int at = l.inputs[0];
  for (;;) {
    const Layer& producer = graph.layers[size_t(at)];
    if (producer.kind == LayerKind::Flatten) return producer.inputs.size() == 1 ? at : -1;
    const bool per_feature = producer.kind == LayerKind::Dropout || producer.kind == LayerKind::ReLU ||
                             producer.kind == LayerKind::Activation || producer.kind == LayerKind::StochasticDepth;
    if (!per_feature || producer.inputs.size() != 1) return -1;
    at = producer.inputs[0];
  }
}

std::map<std::string, Shape> flattened_maps(const LayerGraph& graph) {
  std::map<std::string, Shape> found;
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    const Layer& l = graph.layers[i];
    if (l.kind != LayerKind::Linear) continue;
    const int flatten = flatten_read_by(graph, int(i));
    if (flatten < 0) continue;
    const Shape& map = graph.layers[size_t(graph.layers[size_t(flatten)].inputs[0])].out_shape;
    if (map.size() == 4 && map[1] * map[2] > 1) found[l.name + ".weight"] = {map[1], map[2], map[3]};
  }
  return found;
}

}  // namespace kiln::torch_layout

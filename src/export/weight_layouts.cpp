#include "export/weight_layouts.h"

#include <cmath>

#include "kiln/error.h"

namespace kiln::export_layout {

namespace {

std::vector<float> read_as_float(Executable& exe, int id, const std::string& name) {
  const TensorSpec& t = exe.program().tensors[id];
  if (t.dtype == DType::F32) return exe.read<float>(id);
  if (t.dtype == DType::F64) {
    const std::vector<double> wide = exe.read<double>(id);
    return std::vector<float>(wide.begin(), wide.end());
  }
  fail("tensor '{}' is {}; only float32 and float64 tensors are exported", name, dtype_name(t.dtype));
}

}  // namespace

std::vector<float> read_floats(Executable& exe, const std::string& name) {
  std::vector<float> values = read_as_float(exe, exe.id(name), name);
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]) && bad++ == 0) first = int64_t(i);
  if (bad > 0)
    fail("tensor '{}' holds {} non-finite value{} (the first, {}, at index {}): the model has diverged, and a file "
         "of it would compute nothing useful; nothing was written. Export an earlier checkpoint",
         name, bad, bad == 1 ? "" : "s", values[size_t(first)], first);
  return values;
}

std::vector<float> krsc_to_oihw(const std::vector<float>& krsc, const Shape& shape) {
  const int64_t K = shape.at(0), R = shape.at(1), S = shape.at(2), C = shape.at(3);
  std::vector<float> oihw(krsc.size());
  for (int64_t k = 0; k < K; ++k)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t c = 0; c < C; ++c) oihw[((k * C + c) * R + r) * S + s] = krsc[((k * R + r) * S + s) * C + c];
  return oihw;
}

std::vector<float> hwc_columns_to_chw(const std::vector<float>& matrix, int64_t rows, const Shape& hwc) {
  const int64_t H = hwc.at(0), W = hwc.at(1), C = hwc.at(2), in = H * W * C;
  if (rows * in != int64_t(matrix.size()))
    fail("internal: a {}-row matrix of {} values does not read a {}x{}x{} map", rows, matrix.size(), H, W, C);
  std::vector<float> chw(matrix.size());
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t c = 0; c < C; ++c) chw[o * in + (c * H + h) * W + w] = matrix[o * in + (h * W + w) * C + c];
  return chw;
}

std::map<std::string, Shape> linear_layers_reading_maps(const LayerGraph& graph) {
  std::map<std::string, Shape> found;
  for (const Layer& l : graph.layers) {
    if (l.kind != LayerKind::Linear || l.inputs.size() != 1) continue;
    const Layer& flatten = graph.layers[l.inputs[0]];
    if (flatten.kind != LayerKind::Flatten || flatten.inputs.size() != 1) continue;
    const Shape& map = graph.layers[flatten.inputs[0]].out_shape;
    if (map.size() == 4 && map[1] * map[2] > 1) found[l.name + ".weight"] = {map[1], map[2], map[3]};
  }
  return found;
}

}  // namespace kiln::export_layout

// Adaptive average pooling written as two MatMuls with constant averaging matrices (kiln's export
// where the input's size is not a multiple of the output's: y = A_h x A_w^T), as the kiln node the
// layout patterns make of them (import/onnx_layout_patterns.h), and the channels-last flatten
// (Transpose (0, 2, 3, 1) -> Flatten), which is kiln's own flatten order (its linear readers' columns
// reordered for the loader by import/onnx_flatten_columns.h).
#include <fmt/format.h>

#include "import/onnx_op_table.h"
#include "import/onnx_patterns.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

// Whether `m` (in x out when `transposed`, else out x in) is the averaging matrix of adaptive
// pooling from `in` to `out` cells: output i averages PyTorch's range [floor(i in / out),
// ceil((i + 1) in / out)), each weight 1 / (its length) as float32, every other entry zero.
bool is_averaging_matrix(const OnnxTensor& m, bool transposed) {
  const int64_t in = transposed ? m.dims[0] : m.dims[1], out = transposed ? m.dims[1] : m.dims[0];
  const std::vector<double> v = m.values();
  for (int64_t i = 0; i < out; ++i) {
    const int64_t lo = i * in / out, hi = ((i + 1) * in + out - 1) / out;
    for (int64_t k = 0; k < in; ++k) {
      const double want = k >= lo && k < hi ? double(1.f / float(hi - lo)) : 0.0;
      if (v[size_t(transposed ? k * out + i : i * in + k)] != want) return false;
    }
  }
  return true;
}

void check_adaptive_average(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  const OnnxTensor *rows = ctx.stored(node.input(1)), *columns = ctx.stored(node.input(2));
  if (!is_averaging_matrix(*rows, false) || !is_averaging_matrix(*columns, true))
    problems.push_back(fmt::format(
        "{}: MatMul ('{}', MatMul (x, '{}')) multiplies a feature map by matrices other than adaptive average "
        "pooling's; kiln reads two MatMuls of a map only as that pooling (nn.AdaptiveAvgPool2d as kiln exports it)",
        node_label(node), rows->name, columns->name));
}

void map_adaptive_average(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue& x = ctx.input(node, 0);
  if (x.form != Form::Map)
    fail("'{}': {} pools flat features; kiln's adaptive average pooling reads a feature map", ctx.path(),
         node_label(node));
  const int64_t out_h = ctx.stored(node.input(1))->dims[0], out_w = ctx.stored(node.input(2))->dims[1];
  ctx.from(x).adaptive_avgpool(int(out_h), int(out_w), ctx.layer_name(node));
  ctx.produce(node, Form::Map, x.channels);
}

// kiln's flatten is the file's H,W,C one, so every reader gets the values in the file's order. A
// linear layer reading it (directly, or through dropout and activations, as kiln exports AlexNet's
// classifier) holds its columns in that order too, while kiln's loader takes a linear layer after a
// flatten in PyTorch's C,H,W order: recorded, so that once the shapes settle those columns are put in
// C,H,W order for the loader (import/onnx_flatten_columns.h).
void map_flatten_channels_last(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue& x = ctx.input(node, 0);
  if (x.form != Form::Map)
    fail("'{}': {} transposes flat features (0, 2, 3, 1); kiln flattens feature maps", ctx.path(), node_label(node));
  const std::string& name = ctx.layer_name(node);
  ctx.from(x).flatten(name);
  // Named as the file's Flatten node, which this node replaced (its name and output).
  ctx.checks().channels_last_flattens.push_back(
      {name, fmt::format("Flatten node '{}'", node.name.empty() ? node.outputs.at(0) : node.name)});
  ctx.produce(node, Form::Rows, -1);
}

}  // namespace

const std::vector<OnnxOp> kAdaptivePoolOps = {
    {kKilnDomain, "AdaptiveAvgPool", nullptr, check_adaptive_average, map_adaptive_average},
    {kKilnDomain, "FlattenChannelsLast", nullptr, nullptr, map_flatten_channels_last},
};

}  // namespace kiln::onnx_import

// The nodes that carry a value through: Identity, Dropout (a layer of kiln's, the identity in
// evaluation), and the shape nodes the constant folder evaluates (import/onnx_constants.h), which
// map to no layer. A node reading no data never reaches the handlers (a constant); a shape node
// reading data is refused here, except Shape, which reads only the dimensions (and Slice, a
// channel_slice then: onnx_ops_channel.cpp).
#include <fmt/format.h>

#include "import/onnx_op_table.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

void map_identity(const OnnxNode& node, ImportContext& ctx) { ctx.set(node.outputs.at(0), ctx.input(node, 0)); }

// Dropout's ratio: input 1 from opset 12, the attribute before; 0.5 by default. A float32 ratio is
// PyTorch's decimal (0.2, not 0.20000000298), so a float64 program scales by PyTorch's 1 / (1 - p).
std::optional<double> dropout_ratio(const OnnxNode& node, ImportContext& ctx) {
  if (node.input(1).empty()) return decimal_attribute(node, "ratio", 0.5f);
  const std::optional<double> ratio = ctx.scalar_input(node, 1);
  return ratio ? std::optional<double>(torch_decimal_of(*ratio)) : std::nullopt;
}

void check_dropout(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  const std::optional<double> p = dropout_ratio(node, ctx);
  if (!p || !(*p >= 0 && *p < 1))  // NaN included
    problems.push_back(fmt::format("{}: its ratio is {}; kiln's dropout takes a constant probability in [0, 1)",
                                   node_label(node), p ? fmt::format("{}", *p) : std::string("computed in the graph")));
  if (node.outputs.size() > 1 && !node.outputs[1].empty() &&
      (!ctx.readers(node.outputs[1]).empty() || ctx.is_output(node.outputs[1])))
    problems.push_back(fmt::format("{}: its mask (output 1, '{}') is read; kiln's dropout gives the dropped values only",
                                   node_label(node), node.outputs[1]));
}

void map_dropout(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue x = ctx.input(node, 0);
  const double p = *dropout_ratio(node, ctx);
  if (p == 0) {  // nothing to drop: no layer
    ctx.set(node.outputs.at(0), x);
    return;
  }
  ctx.from(x).dropout(p, ctx.layer_name(node));
  ctx.produce(node, x.form, x.channels, x.one_by_one);
}

// Shape reads only its input's dimensions (the folder's); its result is a constant.
void map_nothing(const OnnxNode&, ImportContext&) {}

// A shape node (Gather, Unsqueeze, ...) that reads a feature map: kiln has no such layer.
void refuse_on_data(const OnnxNode& node, ImportContext&, std::vector<std::string>& problems) {
  problems.push_back(fmt::format("{}: it reads a feature map computed from the input; kiln evaluates {} on constant "
                                 "shapes at import only and has no layer for it", node_label(node), node.op_type));
}

}  // namespace

const std::vector<OnnxOp> kPlumbingOps = {
    {"", "Identity", nullptr, nullptr, map_identity},
    {"", "Dropout", nullptr, check_dropout, map_dropout},
    {"", "Shape", nullptr, nullptr, map_nothing},
    {"", "Gather", nullptr, refuse_on_data, map_nothing},
    {"", "Unsqueeze", nullptr, refuse_on_data, map_nothing},
    {"", "Squeeze", nullptr, refuse_on_data, map_nothing},
    {"", "Cast", nullptr, refuse_on_data, map_nothing},
};

}  // namespace kiln::onnx_import

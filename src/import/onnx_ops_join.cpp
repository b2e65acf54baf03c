// The joins: Add (a residual's sum), Mul (two maps of one shape, or a map and a squeeze-and-
// excitation gate (N, C, 1, 1), broadcast as ONNX and PyTorch broadcast it) and Concat along the
// channels (torch.cat(xs, dim=1)).
#include <fmt/format.h>

#include "import/onnx_op_table.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

// Both inputs data, or a problem naming the constant one.
void check_two_data_inputs(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems,
                           const char* supported) {
  if (node.inputs.size() != 2) {
    problems.push_back(fmt::format("{}: {} inputs; it takes two", node_label(node), node.inputs.size()));
    return;
  }
  for (size_t k = 0; k < 2; ++k)
    if (!ctx.is_data(node.inputs[k]))
      problems.push_back(fmt::format("{}: its input '{}' is a constant; {}", node_label(node), node.inputs[k], supported));
}

// The MatMul whose bias `node` (an Add of a constant) is, if it is one (onnx_ops_head.cpp takes it).
bool adds_matmul_bias(const OnnxNode& node, ImportContext& ctx) {
  for (size_t k = 0; k < 2 && node.inputs.size() == 2; ++k) {
    const std::string &data = node.inputs[k], &constant = node.inputs[1 - k];
    if (!ctx.is_data(data) || ctx.is_data(constant) || ctx.readers(data).size() != 1 || ctx.is_output(data)) continue;
    for (const OnnxNode& n : ctx.nodes())
      if (n.domain.empty() && n.op_type == "MatMul" && !n.outputs.empty() && n.outputs[0] == data) return true;
  }
  return false;
}

void check_add(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  if (adds_matmul_bias(node, ctx)) return;
  check_two_data_inputs(node, ctx, problems,
                        "kiln adds two feature maps (a residual), or a bias to a MatMul as nn.Linear's; it has no "
                        "layer adding a constant");
}

void check_mul(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  check_two_data_inputs(node, ctx, problems,
                        "kiln has no layer scaling by a constant (x * sigmoid(x), x * hardsigmoid(x) and GELU's "
                        "x * 0.5 * (1 + erf(x / sqrt(2))) are read as those activations)");
}

void map_add(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue a = ctx.input(node, 0), b = ctx.input(node, 1);
  if (a.form != b.form || (a.channels > 0 && b.channels > 0 && a.channels != b.channels))
    fail("'{}': {} adds {} and {}: kiln adds values of one shape (a residual's sum)", ctx.path(), node_label(node),
         a.form == Form::Map ? fmt::format("a map of {} channels", a.channels) : "flat features",
         b.form == Form::Map ? fmt::format("a map of {} channels", b.channels) : "flat features");
  ctx.blueprint().add(a.ref, b.ref, ctx.layer_name(node));
  ctx.produce(node, a.form, a.channels > 0 ? a.channels : b.channels, a.one_by_one && b.one_by_one);
}

void map_mul(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue a = ctx.input(node, 0), b = ctx.input(node, 1);
  if (a.form != b.form)
    fail("'{}': {} multiplies a feature map and flat features, which ONNX broadcasts along the map's width; kiln "
         "multiplies maps of one shape, or a map by a gate (N, C, 1, 1)", ctx.path(), node_label(node));
  // The product has the larger operand's shape: a gate (N, C, 1, 1) takes the map's.
  const MappedValue& shape = a.one_by_one ? b : a;
  ctx.blueprint().mul(a.ref, b.ref, ctx.layer_name(node));
  ctx.produce(node, shape.form, shape.channels, a.one_by_one && b.one_by_one);
}

void check_concat(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  const int64_t axis = int_attribute(node, "axis", 1);
  if (axis != 1 && axis != -3)
    problems.push_back(attribute_problem(node, "axis", std::to_string(axis),
                                         "kiln concatenates feature maps along the channels (axis 1)"));
  for (const std::string& in : node.inputs)
    if (!ctx.is_data(in))
      problems.push_back(fmt::format("{}: its input '{}' is a constant; kiln concatenates feature maps computed from the "
                                     "input", node_label(node), in));
}

void map_concat(const OnnxNode& node, ImportContext& ctx) {
  std::vector<Blueprint::Ref> refs;
  int64_t channels = 0;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const MappedValue& v = ctx.input(node, k);
    if (v.form != Form::Map)
      fail("'{}': {} concatenates flat features (input {}, '{}'); kiln concatenates feature maps along the channels",
           ctx.path(), node_label(node), k, node.inputs[k]);
    refs.push_back(v.ref);
    channels = channels < 0 || v.channels < 0 ? -1 : channels + v.channels;
  }
  if (refs.size() == 1) {  // a concatenation of one map is that map
    ctx.set(node.outputs.at(0), ctx.input(node, 0));
    return;
  }
  ctx.blueprint().concat(refs, ctx.layer_name(node));
  ctx.produce(node, Form::Map, channels);
}

}  // namespace

const std::vector<OnnxOp> kJoinOps = {
    {"", "Add", nullptr, check_add, map_add},
    {"", "Mul", nullptr, check_mul, map_mul},
    {"", "Concat", nullptr, check_concat, map_concat},
};

}  // namespace kiln::onnx_import

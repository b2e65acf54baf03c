// LinearOverMap: the kiln node the layout patterns make of a MatMul by a stored (C, K) matrix (and
// the bias Add after it) between a block's two permutes (import/onnx_layout_patterns.h), ConvNeXt's
// nn.Linear applied at every position of a channels-last map: kiln's linear layer over a feature
// map, its weight nn.Linear's (out, in): the stored matrix transposed, or as stored where the MatMul
// read it through a Transpose (import/onnx_linear_weights.h).
#include <fmt/format.h>

#include "import/onnx_linear_weights.h"
#include "import/onnx_op_table.h"
#include "import/onnx_patterns.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

// The weight and bias; where the exporter stored the weight transposed under a name of its own
// ("onnx::MatMul_780", PyTorch's TorchScript exporter), only the bias, whose name is the module's.
std::vector<std::string> linear_over_map_parameters(const OnnxNode& node, ImportContext&) {
  if (node.input(1).find('.') == std::string::npos && !node.input(2).empty()) return {node.input(2)};
  std::vector<std::string> names = {node.input(1)};
  if (!node.input(2).empty()) names.push_back(node.input(2));
  return names;
}

void check_linear_over_map(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  const size_t before = problems.size();
  ctx.check_weight(node, 1, "its weight", problems);
  if (!node.input(2).empty()) ctx.check_weight(node, 2, "its bias", problems);
  if (problems.size() > before) return;
  const OnnxTensor& w = *ctx.stored(node.input(1));
  const int64_t out = w.dims.at(weight_out_in(node) ? 0 : 1);
  if (!node.input(2).empty() && ctx.stored(node.input(2))->dims != Shape{out})
    problems.push_back(fmt::format("{}: its bias '{}' is {}; the product has {} features", node_label(node),
                                   node.input(2), shape_str(ctx.stored(node.input(2))->dims), out));
}

void map_linear_over_map(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue x = ctx.input(node, 0);
  const OnnxTensor& w = ctx.weight(node, 1, "its weight");
  const bool out_in = weight_out_in(node);  // already nn.Linear's (out, in)
  const int64_t in = w.dims.at(out_in ? 1 : 0), out = w.dims.at(out_in ? 0 : 1);
  if (x.form != Form::Map || (x.channels > 0 && x.channels != in))
    fail("'{}': {} multiplies each position's {} channels by the matrix '{}' of shape {}, but its input is {}",
         ctx.path(), node_label(node), in, w.name, shape_str(w.dims),
         x.form == Form::Map ? fmt::format("a map of {} channels", x.channels) : std::string("flat features"));
  LinearAttrs a;
  a.out_features = int(out);
  a.bias = !node.input(2).empty();
  a.init = WeightInit::torch_default();  // nn.Linear's own, for a model trained from scratch
  a.bias_init = BiasInit::TorchDefault;
  const std::string& name = ctx.layer_name(node);
  ctx.from(x).fc(a, name);
  if (!out_in)
    ctx.note(fmt::format("{}: its weight '{}' (in, out) is transposed to nn.Linear's (out, in)", node_label(node), w.name));
  ctx.add_weight(node, name + ".weight", out_in ? named_tensor(w) : transposed(w));
  if (a.bias) ctx.add_weight(node, name + ".bias", named_tensor(ctx.weight(node, 2, "its bias")));
  ctx.produce(node, Form::Map, out);
}

}  // namespace

const std::vector<OnnxOp> kLinearOverMapOps = {
    {kKilnDomain, "LinearOverMap", linear_over_map_parameters, check_linear_over_map, map_linear_over_map},
};

}  // namespace kiln::onnx_import

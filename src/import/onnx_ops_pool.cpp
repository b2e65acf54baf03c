// Pooling: MaxPool and AveragePool windows, and the global average (GlobalAveragePool, ReduceMean
// over H and W). kiln's global_avgpool gives the flat (N, C) a classifier reads; where ONNX keeps
// the (N, C, 1, 1) map for another reader (a squeeze-and-excitation block's 1x1 convolution), the
// pooling is adaptive_avgpool(1, 1), which keeps it too.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "import/onnx_op_table.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

// ---- MaxPool, AveragePool ---------------------------------------------------------------------

void check_window_pool(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  const std::vector<int64_t> kernel = ints_attribute(node, "kernel_shape");
  if (kernel.size() != 2 || kernel[0] < 1 || kernel[1] < 1)
    problems.push_back(attribute_problem(node, "kernel_shape", fmt::format("[{}]", fmt::join(kernel, ", ")),
                                         "kiln's poolings are 2-D: two sizes, each at least 1"));
  const std::string auto_pad = string_attribute(node, "auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && !auto_pad.empty())
    problems.push_back(attribute_problem(node, "auto_pad", "'" + auto_pad + "'",
                                         "kiln takes explicit pads (NOTSET) or VALID; PyTorch's exporter writes pads"));
  const std::vector<int64_t> strides = ints_attribute(node, "strides"), pads = ints_attribute(node, "pads");
  if (!strides.empty() && (strides.size() != 2 || std::min(strides[0], strides[1]) < 1))
    problems.push_back(attribute_problem(node, "strides", fmt::format("[{}]", fmt::join(strides, ", ")),
                                         "two strides, each at least 1"));
  if (!pads.empty() && (pads.size() != 4 || *std::min_element(pads.begin(), pads.end()) < 0))
    problems.push_back(attribute_problem(node, "pads", fmt::format("[{}]", fmt::join(pads, ", ")),
                                         "four paddings (top, left, bottom, right), none negative"));
  const std::vector<int64_t> dilations = ints_attribute(node, "dilations");
  if (!dilations.empty() && dilations != std::vector<int64_t>{1, 1})
    problems.push_back(attribute_problem(node, "dilations", fmt::format("[{}]", fmt::join(dilations, ", ")),
                                         "kiln's poolings read neighbouring cells (dilations 1, 1)"));
  const int64_t ceil = int_attribute(node, "ceil_mode", 0);
  if (ceil != 0 && ceil != 1) problems.push_back(attribute_problem(node, "ceil_mode", std::to_string(ceil), "0 or 1"));
  // MaxPool's indices (output 1): kiln's pooling gives the map only.
  if (node.outputs.size() > 1 && !node.outputs[1].empty() &&
      (!ctx.readers(node.outputs[1]).empty() || ctx.is_output(node.outputs[1])))
    problems.push_back(fmt::format("{}: its indices (output 1, '{}') are read; kiln's max pooling gives the pooled map "
                                   "only", node_label(node), node.outputs[1]));
}

PoolAttrs pool_attrs(const OnnxNode& node) {
  PoolAttrs a;
  const std::vector<int64_t> kernel = ints_attribute(node, "kernel_shape");
  a.kernel_h = int(kernel.at(0)), a.kernel_w = int(kernel.at(1));
  if (const std::vector<int64_t> s = ints_attribute(node, "strides"); s.size() == 2) a.stride_h = int(s[0]), a.stride_w = int(s[1]);
  if (string_attribute(node, "auto_pad", "NOTSET") != "VALID")
    if (const std::vector<int64_t> p = ints_attribute(node, "pads"); p.size() == 4)
      a.pad_top = int(p[0]), a.pad_left = int(p[1]), a.pad_bottom = int(p[2]), a.pad_right = int(p[3]);
  a.ceil_mode = int_attribute(node, "ceil_mode", 0) == 1;
  // ONNX's default leaves the padding out of the divisor; PyTorch's exporter writes it either way.
  a.count_include_pad = int_attribute(node, "count_include_pad", 0) == 1;
  return a;
}

void map_window_pool(const OnnxNode& node, ImportContext& ctx, bool max) {
  const MappedValue x = ctx.input(node, 0);
  if (x.form != Form::Map)
    fail("'{}': {} reads flat features; kiln pools feature maps (N, C, H, W)", ctx.path(), node_label(node));
  const PoolAttrs a = pool_attrs(node);
  const std::string& name = ctx.layer_name(node);
  if (max) ctx.from(x).maxpool(a, name);
  else ctx.from(x).avgpool(a, name);
  // Before opset 19 ONNX's ceil_mode keeps a last window that starts in the padding, which PyTorch's
  // rule (kiln's) drops: the Blueprint's shapes tell whether this input has one (onnx_import_checks).
  if (a.ceil_mode && ctx.model().opset < 19)
    ctx.checks().ceil_pools.push_back({name, node_label(node), a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_top,
                                       a.pad_left, a.pad_bottom, a.pad_right});
  ctx.produce(node, Form::Map, x.channels);
}

// ---- the global average -------------------------------------------------------------------------

// Whether `reader` of the (N, C, 1, 1) value `value` only makes it (N, C): Flatten(axis 1), or a
// Reshape to (N, -1) / (N, C).
bool flattens(const OnnxNode& reader, const std::string& value, int64_t channels, ImportContext& ctx) {
  if (!reader.domain.empty() || reader.input(0) != value) return false;
  if (reader.op_type == "Flatten") return int_attribute(reader, "axis", 1) == 1;
  if (reader.op_type != "Reshape") return false;
  const Folded* shape = ctx.constant(reader.input(1));
  if (!shape || shape->count() != 2 || shape->floating) return false;
  const FoldedInt& f = shape->ints[1];
  return f.kind == FoldedInt::Kind::Number && (f.value == -1 || f.value == channels);
}

void map_global_average(const OnnxNode& node, ImportContext& ctx, bool keepdims) {
  const MappedValue x = ctx.input(node, 0);
  if (x.form != Form::Map)
    fail("'{}': {} averages flat features; kiln averages feature maps (N, C, H, W) over H and W", ctx.path(),
         node_label(node));
  const std::string& out = node.outputs.at(0);
  // The readers' Reshape shapes may be computed from this value's shape: it is (N, C, 1, 1) either way.
  ctx.set(out, {x.ref, Form::Map, x.channels, true});
  bool flat = !keepdims;
  if (keepdims && !ctx.is_output(out) && !ctx.readers(out).empty()) {
    flat = true;
    for (int r : ctx.readers(out)) flat = flat && flattens(ctx.nodes()[size_t(r)], out, x.channels, ctx);
  }
  const std::string& name = ctx.layer_name(node);
  if (flat) ctx.from(x).global_avgpool(name);
  else ctx.from(x).adaptive_avgpool(1, 1, name);
  ctx.produce(node, flat ? Form::Rows : Form::Map, x.channels, keepdims);
}

// ReduceMean's axes: the attribute (before opset 18) or input 1.
std::optional<std::set<int64_t>> reduce_axes(const OnnxNode& node, ImportContext& ctx) {
  std::vector<int64_t> axes = ints_attribute(node, "axes");
  if (!node.input(1).empty()) {
    const Folded* f = ctx.constant(node.input(1));
    const std::optional<std::vector<int64_t>> v = f ? f->numbers() : std::nullopt;
    if (!v) return std::nullopt;
    axes = *v;
  }
  std::set<int64_t> out;
  for (int64_t a : axes) out.insert(a < 0 ? a + 4 : a);
  return out;
}

void check_reduce_mean(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  const std::optional<std::set<int64_t>> axes = reduce_axes(node, ctx);
  if (!axes || *axes != std::set<int64_t>{2, 3})
    problems.push_back(fmt::format("{}: it averages over {}; kiln averages a feature map (N, C, H, W) over H and W "
                                   "(axes 2, 3), as x.mean((2, 3)) and adaptive_avg_pool2d(x, 1) do",
                                   node_label(node),
                                   axes ? fmt::format("the axes [{}]", fmt::join(*axes, ", ")) : "axes the file computes"));
}

}  // namespace

const std::vector<OnnxOp> kPoolOps = {
    {"", "MaxPool", nullptr, check_window_pool,
     [](const OnnxNode& n, ImportContext& c) { map_window_pool(n, c, true); }},
    {"", "AveragePool", nullptr, check_window_pool,
     [](const OnnxNode& n, ImportContext& c) { map_window_pool(n, c, false); }},
    {"", "GlobalAveragePool", nullptr, nullptr,
     [](const OnnxNode& n, ImportContext& c) { map_global_average(n, c, true); }},
    {"", "ReduceMean", nullptr, check_reduce_mean,
     [](const OnnxNode& n, ImportContext& c) { map_global_average(n, c, int_attribute(n, "keepdims", 1) == 1); }},
};

}  // namespace kiln::onnx_import

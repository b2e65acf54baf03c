// The channel layers: channel shuffle (the kiln node the layout patterns make of Reshape ->
// Transpose -> Reshape, import/onnx_layout_patterns.h) and Slice on axis 1 as channel_slice
// (x.narrow(1, start, count), x.chunk(2, dim=1)'s halves), of a map's channels or flat rows'
// features; a Slice keeping the whole of its axis (any axis) is the identity. A Slice of constants
// never reaches here: the constant folder evaluates it.
#include <fmt/format.h>

#include <limits>

#include "import/onnx_layout_patterns.h"
#include "import/onnx_op_table.h"
#include "import/onnx_patterns.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

void map_channel_shuffle(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue& x = ctx.input(node, 0);
  const int64_t g = int_attribute(node, "groups", 1);
  if (x.form != Form::Map || (x.channels > 0 && x.channels % g != 0))
    fail("'{}': {} shuffles the channels in {} groups, but its input is {}: kiln shuffles the channels of a feature map "
         "in groups dividing them", ctx.path(), node_label(node), g,
         x.form == Form::Map ? fmt::format("a map of {} channels", x.channels) : std::string("flat features"));
  ctx.from(x).channel_shuffle(int(g), ctx.layer_name(node));
  ctx.produce(node, Form::Map, x.channels);
}

// A Slice's one start, end, axis and step: the inputs (opset 10 and up) or the attributes (below).
struct SliceRange {
  std::optional<int64_t> start, end, axis, step;
};

std::optional<int64_t> one_number(const OnnxNode& node, size_t k, ImportContext& ctx, const char* attribute,
                                  std::optional<int64_t> fallback) {
  if (node.input(k).empty()) {
    const OnnxAttribute* a = node.attribute(attribute);
    if (!a) return fallback;
    return a->ints.size() == 1 ? std::optional<int64_t>(a->ints[0]) : std::nullopt;
  }
  const Folded* f = ctx.constant(node.input(k));
  const std::optional<std::vector<int64_t>> v = f ? f->numbers() : std::nullopt;
  return v && v->size() == 1 ? std::optional<int64_t>((*v)[0]) : std::nullopt;
}

// Whether a missing start or end is computed in the graph from a Shape node (known at mapping).
bool shape_computed(const OnnxNode& node, ImportContext& ctx) {
  for (size_t k : {size_t(1), size_t(2)})
    if (!node.input(k).empty() && !ctx.constant(node.input(k)) && !ctx.stored(node.input(k)) &&
        !ctx.is_data(node.input(k)))
      return true;
  return false;
}

SliceRange slice_range(const OnnxNode& node, ImportContext& ctx) {
  return {one_number(node, 1, ctx, "starts", std::nullopt), one_number(node, 2, ctx, "ends", std::nullopt),
          one_number(node, 3, ctx, "axes", 0), one_number(node, 4, ctx, "steps", 1)};
}

// Whether the Slice keeps the whole of its axis, whatever its size: from 0, step 1, to an end past
// any dimension kiln builds (PyTorch writes x[:, :c]'s `:` over the batch as 0 to 2^63 - 1, the
// dynamo exporter as a Slice of its own). It is the identity then, on any axis.
bool keeps_whole_axis(const SliceRange& r) {
  return r.start == 0 && r.end && *r.end >= std::numeric_limits<int32_t>::max() && r.step == 1;
}

void check_slice(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  const SliceRange r = slice_range(node, ctx);
  // Bounds computed from Shape (x.chunk(2, dim=1) in PyTorch's TorchScript export: size(1) // 2)
  // are known once the input is mapped: map_slice checks them then.
  if ((!r.start || !r.end) && r.axis && r.step && shape_computed(node, ctx)) return;
  if (r.axis && keeps_whole_axis(r)) return;  // the identity
  if (!r.start || !r.end || !r.axis || !r.step)
    problems.push_back(fmt::format("{}: its starts, ends, axes and steps are not one constant number each; kiln slices "
                                   "one run of channels (x.narrow(1, start, count), x.chunk(n, dim=1))", node_label(node)));
  else if (*r.axis != 1)
    problems.push_back(fmt::format("{}: it slices axis {}; kiln slices the channels (axis 1) only", node_label(node),
                                   *r.axis));
  else if (*r.step != 1)
    problems.push_back(fmt::format("{}: its step is {}; kiln slices a run of neighbouring channels (step 1)",
                                   node_label(node), *r.step));
}

void map_slice(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue& x = ctx.input(node, 0);
  const SliceRange r = slice_range(node, ctx);
  if (keeps_whole_axis(r)) {  // the input itself
    ctx.set(node.outputs.at(0), x);
    return;
  }
  if (!r.start || !r.end)
    fail("'{}': {} slices between bounds computed in the graph that kiln cannot evaluate from its input's shape; "
         "kiln slices one run of channels (x.narrow(1, start, count), x.chunk(n, dim=1))", ctx.path(), node_label(node));
  int64_t start = *r.start, end = *r.end;
  // ONNX counts negative positions from the end and clamps past it (PyTorch writes x[:, a:] with
  // end 2^63 - 1): both need the channels.
  const bool needs_channels = start < 0 || end < 0 || end > std::numeric_limits<int32_t>::max();
  if (needs_channels && x.channels < 0)
    fail("'{}': {} slices from {} to {} of features whose number kiln does not know here (after a flatten); slice "
         "with non-negative bounds", ctx.path(), node_label(node), start, end);
  const int64_t c = x.channels;
  if (start < 0) start += c;
  if (end < 0) end += c;
  if (c > 0) end = std::min(end, c);
  if (start < 0 || end <= start || (c > 0 && start >= c))
    fail("'{}': {} takes channels [{}, {}) of {}: kiln slices a non-empty run of the input's channels", ctx.path(),
         node_label(node), *r.start, *r.end, c > 0 ? std::to_string(c) : std::string("its input's"));
  if (c > 0 && start == 0 && end == c) {  // every channel: the input itself
    ctx.set(node.outputs.at(0), x);
    return;
  }
  ctx.from(x).channel_slice(int(start), int(end - start), ctx.layer_name(node));
  ctx.produce(node, x.form, end - start, x.one_by_one);
}

}  // namespace

const std::vector<OnnxOp> kChannelOps = {
    {kKilnDomain, "ChannelShuffle", nullptr, nullptr, map_channel_shuffle},
    {"", "Slice", nullptr, check_slice, map_slice},
};

}  // namespace kiln::onnx_import

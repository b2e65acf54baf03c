// The channel splits: x.chunk(n, dim=1) and x.split(sizes, dim=1) (ShuffleNetV2's halves, any
// branch-per-slice block), each piece a channel_slice of the input. PyTorch writes them three ways:
// the TorchScript exporter as Slices (onnx_ops_channel.cpp); the dynamo exporter as Split (opset 18:
// num_outputs, or the sizes as an input), and, with optimize=False, as SplitToSequence (a scalar
// chunk size or the sizes) read by SequenceAt at constant positions. A SplitToSequence maps to no
// layer: it records its pieces (ImportContext::set_sequence), and each SequenceAt becomes the slice
// of its piece, so a piece nobody reads makes no layer.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "import/onnx_op_table.h"
#include "import/onnx_patterns.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

constexpr const char* kWhatKilnSplits =
    "kiln splits the channels (axis 1) into runs of constant sizes (x.chunk(n, dim=1), x.split(sizes, dim=1))";

// The node's constant input k as numbers (a scalar or a 1-D tensor), or nothing.
std::optional<std::vector<int64_t>> constant_numbers(const OnnxNode& node, size_t k, ImportContext& ctx) {
  if (node.input(k).empty()) return std::nullopt;
  const Folded* f = ctx.constant(node.input(k));
  return f && !f->floating ? f->numbers() : std::nullopt;
}

void check_axis(const OnnxNode& node, std::vector<std::string>& problems) {
  const int64_t axis = int_attribute(node, "axis", 0);
  if (axis != 1)
    problems.push_back(attribute_problem(node, "axis", std::to_string(axis), kWhatKilnSplits));
}

// The sizes of `channels` split into pieces of `chunk` (the last one smaller where it does not
// divide), as ONNX's SplitToSequence with a scalar split and Split with num_outputs make them.
std::vector<int64_t> chunks(int64_t channels, int64_t chunk) {
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < channels; start += chunk) sizes.push_back(std::min(chunk, channels - start));
  return sizes;
}

// The pieces' sizes, checked against the input's channels where kiln knows them.
std::vector<int64_t> checked_sizes(const OnnxNode& node, ImportContext& ctx, const MappedValue& x,
                                   std::vector<int64_t> sizes) {
  const int64_t sum = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  const bool positive = std::all_of(sizes.begin(), sizes.end(), [](int64_t s) { return s > 0; });
  if (x.form != Form::Map && x.form != Form::Rows)
    fail("'{}': {} splits a value kiln does not hold as a map or rows; {}", ctx.path(), node_label(node),
         kWhatKilnSplits);
  if (!positive || sizes.empty() || (x.channels > 0 && sum != x.channels))
    fail("'{}': {} splits {} channels into pieces of {}: the pieces must be positive and add up to the channels; {}",
         ctx.path(), node_label(node), x.channels > 0 ? std::to_string(x.channels) : std::string("its input's"),
         fmt::format("{}", fmt::join(sizes, ", ")), kWhatKilnSplits);
  return sizes;
}

// One piece: channels [start, start + size) of x under `layer`, the value `output` (the input itself
// where the piece is every channel).
void produce_piece(ImportContext& ctx, const MappedValue& x, int64_t start, int64_t size, const std::string& layer,
                   const std::string& output) {
  if (start == 0 && size == x.channels) {
    ctx.set(output, x);
    return;
  }
  ctx.from(x).channel_slice(int(start), int(size), layer);
  ctx.set(output, {ctx.blueprint().last(), x.form, size, x.one_by_one});
}

// --- Split ------------------------------------------------------------------------------------

void check_split(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  check_axis(node, problems);
  if (!node.input(1).empty() && !constant_numbers(node, 1, ctx))
    problems.push_back(fmt::format("{}: its sizes are computed in the graph; {}", node_label(node), kWhatKilnSplits));
}

void map_split(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue x = ctx.input(node, 0);
  std::vector<int64_t> sizes;
  if (const std::optional<std::vector<int64_t>> given = constant_numbers(node, 1, ctx)) {
    sizes = *given;
  } else {
    // Opset 18's num_outputs, else (below 18) as many equal pieces as outputs.
    const int64_t n = int_attribute(node, "num_outputs", int64_t(node.outputs.size()));
    if (x.channels <= 0 || n < 1)
      fail("'{}': {} splits into {} equal pieces features whose number kiln does not know here; {}", ctx.path(),
           node_label(node), n, kWhatKilnSplits);
    sizes = chunks(x.channels, (x.channels + n - 1) / n);
  }
  sizes = checked_sizes(node, ctx, x, sizes);
  if (sizes.size() != node.outputs.size())
    fail("'{}': {} makes {} pieces but has {} outputs; {}", ctx.path(), node_label(node), sizes.size(),
         node.outputs.size(), kWhatKilnSplits);
  const std::string& layer = ctx.layer_name(node);
  int64_t start = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const std::string& out = node.outputs[k];
    if (!out.empty() && (!ctx.readers(out).empty() || ctx.is_output(out)))
      produce_piece(ctx, x, start, sizes[k], k == 0 ? layer : ctx.claim_name(fmt::format("{}_{}", layer, k)), out);
    start += sizes[k];
  }
}

// --- SplitToSequence and SequenceAt -----------------------------------------------------------

void check_split_to_sequence(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  check_axis(node, problems);
  if (!constant_numbers(node, 1, ctx))
    problems.push_back(fmt::format("{}: its split is {}; {}", node_label(node),
                                   node.input(1).empty() ? "left out (pieces of one channel)" : "computed in the graph",
                                   kWhatKilnSplits));
}

void map_split_to_sequence(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue x = ctx.input(node, 0);
  const Folded* split = ctx.constant(node.input(1));
  const std::vector<int64_t> given = *split->numbers();
  std::vector<int64_t> sizes;
  if (split->dims.empty()) {  // a scalar: the chunk size
    if (x.channels <= 0 || given.at(0) < 1)
      fail("'{}': {} splits into chunks of {} features whose number kiln does not know here; {}", ctx.path(),
           node_label(node), given.at(0), kWhatKilnSplits);
    sizes = chunks(x.channels, given[0]);
  } else {
    sizes = given;
  }
  ctx.set_sequence(node.outputs.at(0), {x, checked_sizes(node, ctx, x, sizes)});
}

void check_sequence_at(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  const std::optional<std::vector<int64_t>> at = constant_numbers(node, 1, ctx);
  if (!at || at->size() != 1)
    problems.push_back(fmt::format("{}: its position is not a constant number; kiln reads the pieces of a channel split "
                                   "at constant positions (a, b = x.chunk(2, dim=1))",
                                   node_label(node)));
}

void map_sequence_at(const OnnxNode& node, ImportContext& ctx) {
  const ChannelSequence* seq = ctx.sequence(node.input(0));
  if (!seq)
    fail("'{}': {} reads '{}', which is not a SplitToSequence's pieces; kiln reads SequenceAt only of a channel split "
         "(x.chunk(n, dim=1))", ctx.path(), node_label(node), node.input(0));
  const int64_t n = int64_t(seq->sizes.size());
  int64_t at = (*constant_numbers(node, 1, ctx))[0];
  if (at < -n || at >= n)
    fail("'{}': {} reads piece {} of {}; {}", ctx.path(), node_label(node), at, n, kWhatKilnSplits);
  if (at < 0) at += n;
  const int64_t start = std::accumulate(seq->sizes.begin(), seq->sizes.begin() + at, int64_t(0));
  produce_piece(ctx, seq->input, start, seq->sizes[size_t(at)], ctx.layer_name(node), node.outputs.at(0));
}

}  // namespace

const std::vector<OnnxOp> kSplitOps = {
    {"", "Split", nullptr, check_split, map_split},
    {"", "SplitToSequence", nullptr, check_split_to_sequence, map_split_to_sequence},
    {"", "SequenceAt", nullptr, check_sequence_at, map_sequence_at},
};

}  // namespace kiln::onnx_import

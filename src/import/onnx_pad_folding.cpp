#include "import/onnx_pad_folding.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "import/onnx_op_table.h"

namespace kiln::onnx_import {
namespace {

bool is(const OnnxNode& n, const char* op) { return n.domain.empty() && n.op_type == op; }

// The amounts a Pad adds around the height and width: top, left, bottom, right.
struct SpatialPads {
  int64_t top = 0, left = 0, bottom = 0, right = 0;
};

// A 4-D Pad's amounts where they are constants, non-negative and of H and W only (N and C not
// padded), from its pads input (opset 11 on) or attribute, and its axes input (opset 18 on).
std::optional<SpatialPads> spatial_pads(const OnnxNode& pad, ConstantFolder& constants) {
  std::vector<int64_t> pads;
  if (!pad.input(1).empty()) {
    const Folded* f = constants.value(pad.input(1));
    const std::optional<std::vector<int64_t>> v = f && !f->floating ? f->numbers() : std::nullopt;
    if (!v) return std::nullopt;
    pads = *v;
  } else if (const OnnxAttribute* a = pad.attribute("pads")) {
    pads = a->ints;
  } else {
    return std::nullopt;
  }
  std::vector<int64_t> axes = {0, 1, 2, 3};
  if (!pad.input(3).empty()) {
    const Folded* f = constants.value(pad.input(3));
    const std::optional<std::vector<int64_t>> v = f && !f->floating ? f->numbers() : std::nullopt;
    if (!v) return std::nullopt;
    axes = *v;
  }
  if (pads.size() != 2 * axes.size()) return std::nullopt;
  int64_t begin[4] = {0, 0, 0, 0}, end[4] = {0, 0, 0, 0};
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t axis = axes[k] < 0 ? axes[k] + 4 : axes[k];
    if (axis < 0 || axis > 3 || pads[k] < 0 || pads[k + axes.size()] < 0) return std::nullopt;
    begin[axis] += pads[k], end[axis] += pads[k + axes.size()];
  }
  if (begin[0] || begin[1] || end[0] || end[1]) return std::nullopt;  // the batch or the channels
  return SpatialPads{begin[2], begin[3], end[2], end[3]};
}

// The padding value: the constant_value input (opset 11 on) or attribute `value`, 0 when left out;
// nothing where it is not a constant.
std::optional<double> pad_value(const OnnxNode& pad, ConstantFolder& constants) {
  if (!pad.input(2).empty()) {
    const Folded* f = constants.value(pad.input(2));
    return f ? f->scalar() : std::nullopt;
  }
  const OnnxAttribute* a = pad.attribute("value");
  return a ? double(a->f) : 0.0;
}

// Whether `reader`'s own padding means padding with `value`, so that the Pad can become part of it.
bool pads_alike(const OnnxNode& reader, double value) {
  if (string_attribute(reader, "auto_pad", "NOTSET") != "NOTSET") return false;  // its pads are not its own
  if (is(reader, "Conv")) return value == 0;
  if (is(reader, "MaxPool")) return value == -std::numeric_limits<double>::infinity() || value <= -3.4e38;
  if (is(reader, "AveragePool")) {
    if (value != 0) return false;
    if (int_attribute(reader, "count_include_pad", 0) == 1) return true;
    const std::vector<int64_t> own = ints_attribute(reader, "pads");
    return std::all_of(own.begin(), own.end(), [](int64_t p) { return p == 0; });
  }
  return false;
}

// Sets the attribute `name` of `node` (adds it where the node leaves it out).
OnnxAttribute& attribute_of(OnnxNode& node, const char* name, OnnxAttribute::Type type) {
  for (OnnxAttribute& a : node.attributes)
    if (a.name == name) return a;
  OnnxAttribute a;
  a.name = name, a.type = type;
  node.attributes.push_back(a);
  return node.attributes.back();
}

// The reader's pads (top, left, bottom, right) with the Pad's added.
std::vector<int64_t> padded(const OnnxNode& reader, const SpatialPads& p) {
  std::vector<int64_t> pads = ints_attribute(reader, "pads");
  if (pads.size() != 4) pads = {0, 0, 0, 0};
  pads[0] += p.top, pads[1] += p.left, pads[2] += p.bottom, pads[3] += p.right;
  return pads;
}

// Whether the padding the reader would end up with is one kiln runs: any for a convolution; the same
// on all four sides for a pooling, whose kernels pad alike (timm's MaxPool2dSame pads one side more
// where the input's size is even, and stays refused there).
bool runs_padded(const OnnxNode& reader, const SpatialPads& p) {
  if (is(reader, "Conv")) return true;
  const std::vector<int64_t> pads = padded(reader, p);
  return std::all_of(pads.begin(), pads.end(), [&](int64_t v) { return v == pads[0]; });
}

void add_pads(OnnxNode& reader, const SpatialPads& p) {
  attribute_of(reader, "pads", OnnxAttribute::Type::Ints).ints = padded(reader, p);
  // The folded zeros count in the average, as they did as values.
  if (is(reader, "AveragePool")) attribute_of(reader, "count_include_pad", OnnxAttribute::Type::Int).i = 1;
}

}  // namespace

std::vector<OnnxNode> fold_explicit_pads(std::vector<OnnxNode> nodes, const OnnxModel& model, ConstantFolder& constants) {
  std::map<std::string, std::vector<int>> readers;
  for (size_t p = 0; p < nodes.size(); ++p)
    for (const std::string& in : nodes[p].inputs)
      if (!in.empty()) readers[in].push_back(int(p));
  std::set<std::string> graph_outputs;
  for (const OnnxValueInfo& v : model.outputs) graph_outputs.insert(v.name);

  std::set<int> removed;
  for (size_t p = 0; p < nodes.size(); ++p) {
    const OnnxNode& pad = nodes[p];
    if (!is(pad, "Pad") || pad.outputs.size() != 1 || string_attribute(pad, "mode", "constant") != "constant") continue;
    const std::string& out = pad.outputs[0];
    if (graph_outputs.count(out)) continue;
    const std::optional<SpatialPads> amounts = spatial_pads(pad, constants);
    const std::optional<double> value = pad_value(pad, constants);
    if (!amounts || !value) continue;
    // One reader reading the padded values as its input 0, and CastLike nodes reading their type.
    int layer = -1;
    bool foldable = true;
    for (int r : readers[out]) {
      const OnnxNode& n = nodes[size_t(r)];
      if (is(n, "CastLike") && n.input(0) != out) continue;
      if (layer >= 0 || n.input(0) != out || !pads_alike(n, *value) || !runs_padded(n, *amounts) ||
          std::count(n.inputs.begin(), n.inputs.end(), out) != 1)
        foldable = false;
      layer = r;
    }
    if (!foldable || layer < 0) continue;
    for (int r : readers[out])
      for (std::string& in : nodes[size_t(r)].inputs)
        if (in == out) in = pad.input(0);
    add_pads(nodes[size_t(layer)], *amounts);
    removed.insert(int(p));
  }
  std::vector<OnnxNode> kept;
  for (size_t p = 0; p < nodes.size(); ++p)
    if (!removed.count(int(p))) kept.push_back(std::move(nodes[p]));
  return kept;
}

}  // namespace kiln::onnx_import

#include "import/onnx_as_strided.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <optional>
#include <set>
#include <string>

#include "import/onnx_op_table.h"
#include "import/onnx_patterns.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

bool is(const OnnxNode& n, const char* op) { return n.domain.empty() && n.op_type == op; }

class AsStrided {
 public:
  AsStrided(std::vector<OnnxNode>& nodes, const OnnxModel& model, ConstantFolder& constants)
      : nodes_(nodes), constants_(constants) {
    for (size_t p = 0; p < nodes_.size(); ++p) {
      for (const std::string& in : nodes_[p].inputs)
        if (!in.empty()) ++uses_[in];
      for (const std::string& out : nodes_[p].outputs)
        if (!out.empty()) writer_[out] = int(p);
    }
    for (const OnnxValueInfo& v : model.outputs) ++uses_[v.name];
  }

  // The Gather at p rewritten (and its Reshape marked for removal in `removed`), if it fits.
  void recognize(int p, std::set<int>& removed) {
    OnnxNode& gather = nodes_[size_t(p)];
    const OnnxAttribute* axis = gather.attribute("axis");
    if (gather.inputs.size() != 2 || (axis && axis->i != 0)) return;
    const int flat = writer_of(gather.inputs[0], "Reshape");
    if (flat < 0 || uses_[gather.inputs[0]] != 1) return;
    const Folded* to = constants_.value(nodes_[size_t(flat)].input(1));
    if (!to || to->numbers() != std::vector<int64_t>{-1}) return;
    std::map<int64_t, std::pair<FoldedInt, int64_t>> axes;  // axis -> (size, stride)
    if (!sum_of_terms(gather.inputs[1], axes) || axes.size() != 4) return;
    if (axes.begin()->first != 0 || axes.rbegin()->first != 3) return;
    if (axes[0].first.kind != FoldedInt::Kind::Batch) return;
    std::vector<int64_t> sizes;
    for (int64_t a = 1; a < 4; ++a) {
      if (axes[a].first.kind != FoldedInt::Kind::Number || axes[a].first.value < 1) return;
      sizes.push_back(axes[a].first.value);
    }
    // The strides a contiguous (N, s1, s2, s3) tensor has (an axis of size 1 takes any stride).
    int64_t contiguous = 1;
    for (int64_t a = 3; a >= 0; --a) {
      const int64_t size = a == 0 ? 2 : axes[a].first.value;
      if (size != 1 && axes[a].second != contiguous) return;
      if (a > 0) contiguous *= size;
    }
    removed.insert(flat);
    OnnxAttribute attr;
    attr.name = "sizes";
    attr.type = OnnxAttribute::Type::Ints;
    attr.ints = sizes;
    gather.domain = kKilnDomain;
    gather.op_type = "AsStridedContiguous";
    gather.inputs = {nodes_[size_t(flat)].input(0)};
    gather.attributes = {attr};
  }

 private:
  int writer_of(const std::string& value, const char* op) const {
    const auto w = writer_.find(value);
    return w != writer_.end() && is(nodes_[size_t(w->second)], op) ? w->second : -1;
  }

  std::optional<FoldedInt> scalar(const std::string& value) {
    const Folded* f = constants_.value(value);
    if (!f || f->floating || f->ints.size() != 1) return std::nullopt;
    return f->ints[0];
  }

  // `value` = offset 0 + one term per axis (Adds), each term Unsqueeze (Range (0, size, 1) * stride).
  bool sum_of_terms(const std::string& value, std::map<int64_t, std::pair<FoldedInt, int64_t>>& axes) {
    if (const std::optional<FoldedInt> zero = scalar(value))
      return zero->kind == FoldedInt::Kind::Number && zero->value == 0;
    const int add = writer_of(value, "Add");
    if (add >= 0) {
      const OnnxNode& n = nodes_[size_t(add)];
      return n.inputs.size() == 2 && sum_of_terms(n.inputs[0], axes) && sum_of_terms(n.inputs[1], axes);
    }
    const int unsqueeze = writer_of(value, "Unsqueeze");
    if (unsqueeze < 0) return false;
    const OnnxNode& u = nodes_[size_t(unsqueeze)];
    const Folded* kept = constants_.value(u.input(1));
    const std::optional<std::vector<int64_t>> unsqueezed = kept ? kept->numbers() : std::nullopt;
    if (!unsqueezed || unsqueezed->size() != 3) return false;
    std::set<int64_t> other(unsqueezed->begin(), unsqueezed->end());
    int64_t axis = -1;
    for (int64_t a = 0; a < 4; ++a)
      if (!other.count(a)) axis = a;
    if (axis < 0 || other.size() != 3 || axes.count(axis)) return false;
    const int mul = writer_of(u.input(0), "Mul");
    if (mul < 0) return false;
    const OnnxNode& m = nodes_[size_t(mul)];
    const int range = writer_of(m.input(0), "Range");
    const std::optional<FoldedInt> stride = scalar(m.input(1));
    if (range < 0 || !stride || stride->kind != FoldedInt::Kind::Number) return false;
    const OnnxNode& r = nodes_[size_t(range)];
    const std::optional<FoldedInt> start = scalar(r.input(0)), size = scalar(r.input(1)), step = scalar(r.input(2));
    const auto number = [](const std::optional<FoldedInt>& v, int64_t want) {
      return v && v->kind == FoldedInt::Kind::Number && v->value == want;
    };
    if (!number(start, 0) || !number(step, 1) || !size || size->kind == FoldedInt::Kind::Unknown) return false;
    axes[axis] = {*size, stride->value};
    return true;
  }

  std::vector<OnnxNode>& nodes_;
  ConstantFolder& constants_;
  std::map<std::string, int> uses_;
  std::map<std::string, int> writer_;
};

}  // namespace

std::vector<OnnxNode> recognize_contiguous_as_strided(std::vector<OnnxNode> nodes, const OnnxModel& model,
                                                      ConstantFolder& constants) {
  std::set<int> removed;
  AsStrided finder(nodes, model, constants);
  for (size_t p = 0; p < nodes.size(); ++p)
    if (is(nodes[p], "Gather")) finder.recognize(int(p), removed);
  if (removed.empty()) return nodes;
  std::vector<OnnxNode> out;
  for (size_t p = 0; p < nodes.size(); ++p)
    if (!removed.count(int(p))) out.push_back(std::move(nodes[p]));
  return out;
}

namespace {

// x itself, once x is the (N, s1, s2, s3) the indices enumerate: a map of s1 channels, of one
// position where s2 = s3 = 1 (kiln knows a map's height and width only then, as a pooled one).
void map_as_strided_contiguous(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue& x = ctx.input(node, 0);
  const OnnxAttribute* sizes = node.attribute("sizes");
  const std::vector<int64_t> s = sizes ? sizes->ints : std::vector<int64_t>{};
  if (s.size() != 3 || x.form != Form::Map || x.channels != s[0] || s[1] != 1 || s[2] != 1 || !x.one_by_one)
    fail("'{}': {} (x.as_strided, read as a Gather of every element in order) views its input as (N, {}); kiln reads "
         "it only as the identity of a pooled map (N, C, 1, 1) of the same C: export with the model's own "
         "nn.AdaptiveAvgPool2d(1) at a size whose last map is 1x1, or with the TorchScript exporter (dynamo=False)",
         ctx.path(), node_label(node), fmt::format("{}", fmt::join(s, ", ")));
  ctx.set(node.outputs.at(0), x);
}

}  // namespace

const std::vector<OnnxOp> kAsStridedOps = {
    {kKilnDomain, "AsStridedContiguous", nullptr, nullptr, map_as_strided_contiguous},
};

}  // namespace kiln::onnx_import

#include "import/onnx_layout_patterns.h"

#include <map>
#include <set>

#include "import/onnx_patterns.h"

namespace kiln::onnx_import {
namespace {

bool is(const OnnxNode& n, const char* op) { return n.domain.empty() && n.op_type == op; }

bool has_perm(const OnnxNode& n, const std::vector<int64_t>& perm) {
  const OnnxAttribute* a = n.attribute("perm");
  return a && a->ints == perm;
}

class LayoutRecognizer {
 public:
  LayoutRecognizer(std::vector<OnnxNode> nodes, const OnnxModel& model, ConstantFolder& constants)
      : constants_(constants), nodes_(std::move(nodes)) {
    for (size_t p = 0; p < nodes_.size(); ++p)
      for (const std::string& in : nodes_[p].inputs)
        if (!in.empty()) ++uses_[in], reader_[in] = int(p);
    for (const OnnxValueInfo& v : model.outputs) ++uses_[v.name];
  }

  std::vector<OnnxNode> run() {
    for (size_t p = 0; p < nodes_.size(); ++p) {
      if (removed_.count(int(p))) continue;
      if (is(nodes_[p], "Reshape")) channel_shuffle(int(p)) || group_norm(int(p));
      else if (is(nodes_[p], "Transpose")) layer_norm_over_channels(int(p)) || flatten_channels_last(int(p));
      else if (is(nodes_[p], "Mul")) layer_scale(int(p));
      else if (is(nodes_[p], "MatMul")) adaptive_average(int(p));
    }
    std::vector<OnnxNode> out;
    for (size_t p = 0; p < nodes_.size(); ++p)
      if (!removed_.count(int(p))) out.push_back(std::move(nodes_[p]));
    return out;
  }

 private:
  // The one reader of node p's first output (no other reader, not a graph output), or -1.
  int only_reader(int p) const {
    const std::string& out = nodes_[size_t(p)].outputs.at(0);
    const auto uses = uses_.find(out);
    if (uses == uses_.end() || uses->second != 1) return -1;
    return reader_.at(out);
  }

  // A reshape target's dimensions as numbers (0 copies the input's: the batch), or nothing.
  std::optional<std::vector<int64_t>> target(const OnnxNode& reshape) {
    const Folded* f = constants_.value(reshape.input(1));
    if (!f || f->floating) return std::nullopt;
    std::vector<int64_t> dims;
    for (const FoldedInt& d : f->ints) dims.push_back(d.kind == FoldedInt::Kind::Number ? d.value : -2);
    return dims;
  }

  // Ends the pattern at node `last`: one kiln node there reading `inputs`.
  void replace(int last, const char* op, std::vector<std::string> inputs, std::vector<OnnxAttribute> attributes) {
    OnnxNode& n = nodes_[size_t(last)];
    n.domain = kKilnDomain;
    n.op_type = op;
    n.inputs = std::move(inputs);
    n.attributes = std::move(attributes);
  }

  static OnnxAttribute int_attribute(const char* name, int64_t value) {
    OnnxAttribute a;
    a.name = name;
    a.type = OnnxAttribute::Type::Int;
    a.i = value;
    return a;
  }

  bool channel_shuffle(int r1) {
    const int t = only_reader(r1);
    if (t < 0 || !is(nodes_[size_t(t)], "Transpose") || !has_perm(nodes_[size_t(t)], {0, 2, 1, 3, 4})) return false;
    const int r2 = only_reader(t);
    if (r2 < 0 || !is(nodes_[size_t(r2)], "Reshape")) return false;
    const std::optional<std::vector<int64_t>> grouped = target(nodes_[size_t(r1)]), back = target(nodes_[size_t(r2)]);
    // (N, g, C/g, H, W) back to (N, C, H, W): g and C/g numbers whose product is C.
    if (!grouped || !back || grouped->size() != 5 || back->size() != 4) return false;
    const int64_t g = (*grouped)[1], per_group = (*grouped)[2], c = (*back)[1];
    if (g < 1 || per_group < 1 || g * per_group != c) return false;
    removed_.insert({r1, t});
    replace(r2, "ChannelShuffle", {nodes_[size_t(r1)].input(0)}, {int_attribute("groups", g)});
    return true;
  }

  // The node reading node p's output that is an `op` with that output as input 0, or -1.
  int next(int p, const char* op) const {
    const int r = only_reader(p);
    return r >= 0 && is(nodes_[size_t(r)], op) && nodes_[size_t(r)].input(0) == nodes_[size_t(p)].outputs[0] ? r : -1;
  }

  bool group_norm(int r1) {
    const std::optional<std::vector<int64_t>> rows = target(nodes_[size_t(r1)]);
    if (!rows || rows->size() != 3 || (*rows)[1] < 1) return false;
    const int in = next(r1, "InstanceNormalization");
    const int r2 = in < 0 ? -1 : next(in, "Reshape");
    const int mul = r2 < 0 ? -1 : only_reader(r2);
    if (mul < 0 || !is(nodes_[size_t(mul)], "Mul") || nodes_[size_t(mul)].inputs.size() != 2) return false;
    const int add = only_reader(mul);
    if (add < 0 || !is(nodes_[size_t(add)], "Add") || nodes_[size_t(add)].inputs.size() != 2) return false;
    // The affine's tensors: the Mul's and Add's other inputs, stored.
    const auto other = [&](int p, int q) -> std::string {
      const OnnxNode& n = nodes_[size_t(p)];
      const std::string& from = nodes_[size_t(q)].outputs[0];
      const std::string& o = n.inputs[0] == from ? n.inputs[1] : n.inputs[0];
      return constants_.stored(o) ? o : std::string();
    };
    const std::string weight = other(mul, r2), bias = other(add, mul);
    if (weight.empty() || bias.empty()) return false;
    const OnnxNode& norm = nodes_[size_t(in)];
    std::vector<OnnxAttribute> attributes = norm.attributes;
    attributes.push_back(int_attribute("groups", (*rows)[1]));
    removed_.insert({r1, in, r2, mul});
    replace(add, "GroupNorm", {nodes_[size_t(r1)].input(0), weight, bias, norm.input(1), norm.input(2)},
            std::move(attributes));
    return true;
  }

  bool layer_norm_over_channels(int t1) {
    if (!has_perm(nodes_[size_t(t1)], {0, 2, 3, 1})) return false;
    const int ln = only_reader(t1);
    if (ln < 0 || !is(nodes_[size_t(ln)], "LayerNormalization") || nodes_[size_t(ln)].input(0) != nodes_[size_t(t1)].outputs[0])
      return false;
    const int t2 = only_reader(ln);
    if (t2 < 0 || !is(nodes_[size_t(t2)], "Transpose") || !has_perm(nodes_[size_t(t2)], {0, 3, 1, 2})) return false;
    // The statistics outputs (1 and 2) read elsewhere keep the nodes as they are (the handler refuses them).
    for (size_t k = 1; k < nodes_[size_t(ln)].outputs.size(); ++k)
      if (!nodes_[size_t(ln)].outputs[k].empty() && uses_.count(nodes_[size_t(ln)].outputs[k])) return false;
    std::vector<std::string> inputs = nodes_[size_t(ln)].inputs;
    inputs[0] = nodes_[size_t(t1)].input(0);
    const std::vector<OnnxAttribute> attributes = nodes_[size_t(ln)].attributes;
    removed_.insert({t1, ln});
    replace(t2, "LayerNorm2d", std::move(inputs), attributes);
    return true;
  }

  bool flatten_channels_last(int t) {
    if (!has_perm(nodes_[size_t(t)], {0, 2, 3, 1})) return false;
    const int f = only_reader(t);
    if (f < 0 || !is(nodes_[size_t(f)], "Flatten")) return false;
    const OnnxAttribute* axis = nodes_[size_t(f)].attribute("axis");
    if (axis && axis->i != 1) return false;
    removed_.insert(t);
    replace(f, "FlattenChannelsLast", {nodes_[size_t(t)].input(0)}, {});
    return true;
  }

  // A stored matrix (rank 2, floating), or nullptr.
  const OnnxTensor* stored_matrix(const std::string& value) const {
    const OnnxTensor* m = constants_.stored(value);
    return m && m->floating && m->dims.size() == 2 ? m : nullptr;
  }

  void adaptive_average(int columns) {
    const OnnxNode& first = nodes_[size_t(columns)];
    if (first.inputs.size() != 2 || stored_matrix(first.inputs[0]) || !stored_matrix(first.inputs[1])) return;
    const int rows = only_reader(columns);
    if (rows < 0 || !is(nodes_[size_t(rows)], "MatMul")) return;
    const OnnxNode& second = nodes_[size_t(rows)];
    if (second.inputs.size() != 2 || second.inputs[1] != first.outputs[0] || !stored_matrix(second.inputs[0])) return;
    removed_.insert(columns);
    replace(rows, "AdaptiveAvgPool", {first.inputs[0], second.inputs[0], first.inputs[1]}, {});
  }

  void layer_scale(int p) {
    const OnnxNode& mul = nodes_[size_t(p)];
    if (mul.inputs.size() != 2) return;
    for (size_t k = 0; k < 2; ++k) {
      const std::string &gamma = mul.inputs[k], &x = mul.inputs[1 - k];
      const OnnxTensor* t = constants_.stored(gamma);
      // x computed in the graph: neither stored nor folded (a product of two constants stays a Mul).
      if (!t || !t->floating || constants_.stored(x) || constants_.value(x)) continue;
      const Shape& d = t->dims;
      if (!(d.size() == 1 || (d.size() == 3 && d[1] == 1 && d[2] == 1)) || d[0] < 1) continue;
      replace(p, "LayerScale", {x, gamma}, {});
      return;
    }
  }

  ConstantFolder& constants_;
  std::vector<OnnxNode> nodes_;
  std::map<std::string, int> uses_;    // value -> readers (graph outputs count)
  std::map<std::string, int> reader_;  // value -> a reader (the one, where uses is 1)
  std::set<int> removed_;
};

}  // namespace

std::vector<OnnxNode> recognize_layout_patterns(std::vector<OnnxNode> nodes, const OnnxModel& model,
                                                ConstantFolder& constants) {
  return LayoutRecognizer(std::move(nodes), model, constants).run();
}

}  // namespace kiln::onnx_import

#include "import/onnx_layout_patterns.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <set>

#include "import/onnx_op_table.h"
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
    for (size_t p = 0; p < nodes_.size(); ++p) {
      for (const std::string& in : nodes_[p].inputs)
        if (!in.empty()) ++uses_[in], reader_[in] = int(p);
      for (const std::string& out : nodes_[p].outputs)
        if (!out.empty()) writer_[out] = int(p);
    }
    for (const OnnxValueInfo& v : model.outputs) ++uses_[v.name];
  }

  std::vector<OnnxNode> run() {
    for (size_t p = 0; p < nodes_.size(); ++p) {
      if (removed_.count(int(p))) continue;
      if (is(nodes_[p], "Reshape")) channel_shuffle(int(p)) || group_norm(int(p));
      else if (is(nodes_[p], "Transpose"))
        layer_norm_over_channels(int(p)) || channels_last_block(int(p)) || flatten_channels_last(int(p));
      else if (is(nodes_[p], "Mul")) stochastic_depth(int(p)) || layer_scale(int(p));
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
    if (nodes_[size_t(p)].outputs.empty()) return -1;
    const std::string& out = nodes_[size_t(p)].outputs[0];
    const auto uses = uses_.find(out);
    // A graph output counts as a use but is no node's input: no reader then (squeezenet's final
    // Reshape, the dynamo exporter's view, is read by no node).
    const auto reader = reader_.find(out);
    if (uses == uses_.end() || uses->second != 1 || reader == reader_.end()) return -1;
    return reader->second;
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
    // The dynamo exporter writes torchvision's .contiguous() between the two as an Identity (clone).
    const int clone = only_reader(t) >= 0 && is(nodes_[size_t(only_reader(t))], "Identity") ? only_reader(t) : -1;
    const int r2 = only_reader(clone >= 0 ? clone : t);
    if (r2 < 0 || !is(nodes_[size_t(r2)], "Reshape")) return false;
    const std::optional<std::vector<int64_t>> grouped = target(nodes_[size_t(r1)]), back = target(nodes_[size_t(r2)]);
    // (N, g, C/g, H, W) back to (N, C, H, W), g a number. PyTorch's TorchScript exporter computes
    // C/g, H, W and C from Shape(x) (torchvision's channel_shuffle reads x.size()), which are not
    // known before the graph is mapped (-2 here): those are taken as what the reshapes must hold for
    // the shuffle to run; the numbers that are known must agree (the handler checks C against g).
    if (!grouped || !back || grouped->size() != 5 || back->size() != 4) return false;
    const int64_t g = (*grouped)[1], per_group = (*grouped)[2], c = (*back)[1];
    const auto agree = [](int64_t a, int64_t b) { return a == -2 || b == -2 || a == b; };
    if (g < 1 || per_group == 0 || per_group < -2 || c == 0 || c < -2) return false;
    if (per_group > 0 && c > 0 && g * per_group != c) return false;
    if (!agree((*grouped)[3], (*back)[2]) || !agree((*grouped)[4], (*back)[3])) return false;
    removed_.insert({r1, t});
    if (clone >= 0) removed_.insert(clone);
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

  // A node that treats every value alike, so it reads a channels-last map as a channels-first one.
  static bool per_value(const OnnxNode& n) {
    static const char* const ops[] = {"Relu", "Gelu", "Sigmoid", "Tanh", "Elu", "LeakyRelu", "HardSigmoid", "HardSwish",
                                      "Clip", "Dropout", "Identity"};
    if (n.domain == kKilnDomain) return n.op_type == "Silu" || n.op_type == "Hardswish" || n.op_type == "Gelu";
    return n.domain.empty() && std::any_of(std::begin(ops), std::end(ops), [&](const char* op) { return n.op_type == op; });
  }

  // A stored tensor of rank `rank`, floating, or nullptr.
  const OnnxTensor* stored_of_rank(const std::string& value, size_t rank) const {
    const OnnxTensor* t = constants_.stored(value);
    return t && t->floating && t->dims.size() == rank ? t : nullptr;
  }

  // Transpose (0, 2, 3, 1) -> a chain of layers over the last axis -> Transpose (0, 3, 1, 2): what
  // PyTorch writes for a block computed channels-last between two permutes (ConvNeXt's
  // Permute -> LayerNorm -> Linear -> GELU -> Linear -> Permute). Each layer of the chain becomes
  // its channels-first form: a LayerNormalization over the last axis "LayerNorm2d", a MatMul by a
  // stored (C, K) matrix (and the Add of a stored (K) bias after it) "LinearOverMap"; nodes that
  // treat each value alike stay; the two Transposes become Identity. Any other node in between
  // (timm's channels-last layer scale, a Mul by a (C) vector, among them), or a value read outside
  // the chain, and nothing changes.
  bool channels_last_block(int t1) {
    if (!has_perm(nodes_[size_t(t1)], {0, 2, 3, 1})) return false;
    std::vector<int> chain;
    int at = t1;
    for (int steps = 0; steps < 64; ++steps) {
      const int r = only_reader(at);
      if (r < 0) return false;
      const OnnxNode& n = nodes_[size_t(r)];
      const std::string& from = nodes_[size_t(at)].outputs[0];
      if (is(n, "Transpose")) {
        if (!has_perm(n, {0, 3, 1, 2}) || chain.empty()) return false;
        rewrite_channels_last(t1, chain, r);
        return true;
      }
      if (n.inputs.empty() || n.inputs[0] != from) {
        // Mul and Add take the map as either input.
        if (!((is(n, "Mul") || is(n, "Add")) && n.inputs.size() == 2 && n.inputs[1] == from)) return false;
      }
      const std::string& other = n.inputs.size() == 2 ? (n.inputs[0] == from ? n.inputs[1] : n.inputs[0]) : std::string();
      bool fits = per_value(n);
      if (is(n, "LayerNormalization")) {
        const OnnxAttribute* axis = n.attribute("axis");
        fits = (!axis || axis->i == -1 || axis->i == 3) && stored_of_rank(n.input(1), 1);
        for (size_t k = 1; k < n.outputs.size(); ++k) fits = fits && (n.outputs[k].empty() || !uses_.count(n.outputs[k]));
      } else if (is(n, "MatMul")) {
        fits = n.inputs.size() == 2 && stored_of_rank(other, 2);
      } else if (is(n, "Add")) {
        // The bias of the MatMul just before it.
        fits = !chain.empty() && is(nodes_[size_t(chain.back())], "MatMul") && stored_of_rank(other, 1) != nullptr;
      }
      if (!fits) return false;
      chain.push_back(r);
      at = r;
    }
    return false;
  }

  void rewrite_channels_last(int t1, const std::vector<int>& chain, int t2) {
    const auto other_input = [&](const OnnxNode& n, const std::string& from) {
      return n.inputs[0] == from ? n.inputs[1] : n.inputs[0];
    };
    std::string value = nodes_[size_t(t1)].outputs[0];
    for (size_t k = 0; k < chain.size(); ++k) {
      OnnxNode& n = nodes_[size_t(chain[k])];
      const std::string x = value;
      value = n.outputs[0];
      if (is(n, "LayerNormalization")) {
        std::vector<std::string> inputs = n.inputs;
        inputs[0] = x;
        replace(chain[k], "LayerNorm2d", std::move(inputs), n.attributes);
      } else if (is(n, "MatMul")) {
        const int product = chain[k];
        std::vector<std::string> inputs = {x, other_input(n, x)};
        if (k + 1 < chain.size() && is(nodes_[size_t(chain[k + 1])], "Add")) {
          OnnxNode& add = nodes_[size_t(chain[k + 1])];
          inputs.push_back(other_input(add, n.outputs[0]));
          // The Add passes the product on: the kiln node computes both.
          add.inputs = {n.outputs[0]};
          add.op_type = "Identity";
          add.attributes.clear();
          value = add.outputs[0];
          ++k;
        }
        // Its attributes go with it: kiln_weight_out_in (import/onnx_linear_weights.h) among them.
        replace(product, "LinearOverMap", std::move(inputs), nodes_[size_t(product)].attributes);
      }
    }
    for (int t : {t1, t2}) {
      OnnxNode& n = nodes_[size_t(t)];
      n.op_type = "Identity";
      n.attributes.clear();
    }
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

  bool layer_scale(int p) {
    const OnnxNode& mul = nodes_[size_t(p)];
    if (mul.inputs.size() != 2) return false;
    for (size_t k = 0; k < 2; ++k) {
      const std::string &gamma = mul.inputs[k], &x = mul.inputs[1 - k];
      const OnnxTensor* t = constants_.stored(gamma);
      // x computed in the graph: neither stored nor folded (a product of two constants stays a Mul).
      if (!t || !t->floating || constants_.stored(x) || constants_.value(x)) continue;
      const Shape& d = t->dims;
      if (!(d.size() == 1 || (d.size() == 3 && d[1] == 1 && d[2] == 1)) || d[0] < 1) continue;
      replace(p, "LayerScale", {x, gamma}, {});
      return true;
    }
    return false;
  }

  // The node writing `value` when it is a `op` read only here (once, not a graph output), or -1.
  int writer(const std::string& value, const char* op) const {
    const auto w = writer_.find(value);
    const auto uses = uses_.find(value);
    if (w == writer_.end() || uses == uses_.end() || uses->second != 1 || !is(nodes_[size_t(w->second)], op)) return -1;
    return w->second;
  }

  // Whether `value` folds to the shape (N, 1, 1, 1): one draw per sample, as torchvision's
  // StochasticDepth "row" mode makes its noise.
  bool per_sample_shape(const std::string& value) {
    const Folded* f = constants_.value(value);
    if (!f || f->floating || f->ints.size() != 4 || f->ints[0].kind != FoldedInt::Kind::Batch) return false;
    for (size_t k = 1; k < 4; ++k)
      if (f->ints[k].kind != FoldedInt::Kind::Number || f->ints[k].value != 1) return false;
    return true;
  }

  // The node writing `value` when it is an `op`, however many read it, or -1. The mask's values
  // are read twice inside the pattern in the dynamo exporter's form (RandomUniformLike's output by
  // Less and by the CastLike of q; the Expand's by the Cast and by the CastLike of the Bernoulli),
  // and they are constants (computed from no feature map), which no layer reads.
  int mask_writer(const std::string& value, const char* op) const {
    const auto w = writer_.find(value);
    return w != writer_.end() && is(nodes_[size_t(w->second)], op) ? w->second : -1;
  }

  // Whether `shape` is Shape(x) whole (start 0, no end): the noise drawn per element of x, as
  // nn.Dropout's in training mode, which the dynamo exporter writes as x * (Bernoulli(q) / q).
  bool whole_shape_of(const std::string& shape, const std::string& x) const {
    const int s = mask_writer(shape, "Shape");
    if (s < 0 || nodes_[size_t(s)].input(0) != x) return false;
    const OnnxAttribute *start = nodes_[size_t(s)].attribute("start"), *end = nodes_[size_t(s)].attribute("end");
    return (!start || start->i == 0) && !end;
  }

  // x * (Bernoulli(q) / q): torchvision's stochastic_depth in training mode where the noise has one
  // draw per sample, nn.Dropout(1 - q) in training mode (the dynamo exporter's decomposition) where
  // it has one per element of x. The Bernoulli is written as Less(RandomUniformLike(t), q) cast to
  // float (Cast from the TorchScript exporter, CastLike from the dynamo one, whose q is a
  // CastLike of the constant too), t of shape (N, 1, 1, 1) (ConstantOfShape(shape), or Expand(0,
  // shape) and a Cast) or Shape(x) (Expand(CastLike(0, x), Shape(x)) and a Cast). The value of the
  // Mul becomes StochasticDepth (attribute p = 1 - q), or Dropout (attribute ratio = 1 - q).
  bool stochastic_depth(int p) {
    const OnnxNode& mul = nodes_[size_t(p)];
    if (mul.inputs.size() != 2) return false;
    for (size_t k = 0; k < 2; ++k) {
      const std::string& x = mul.inputs[1 - k];
      const int div = writer(mul.inputs[k], "Div");
      if (div < 0) continue;
      const std::optional<double> q = scalar(nodes_[size_t(div)].input(1));
      int cast = mask_writer(nodes_[size_t(div)].input(0), "Cast");
      if (cast < 0) cast = mask_writer(nodes_[size_t(div)].input(0), "CastLike");
      const int less = cast < 0 ? -1 : mask_writer(nodes_[size_t(cast)].input(0), "Less");
      if (!q || !(*q > 0 && *q <= 1) || less < 0) continue;
      const std::optional<double> threshold = scalar(nodes_[size_t(less)].input(1));
      const int uniform = mask_writer(nodes_[size_t(less)].input(0), "RandomUniformLike");
      if (!threshold || float(*threshold) != float(*q) || uniform < 0) continue;
      const OnnxAttribute *low = nodes_[size_t(uniform)].attribute("low"), *high = nodes_[size_t(uniform)].attribute("high");
      if ((low && low->f != 0.f) || (high && high->f != 1.f)) continue;
      const int shaped = mask_writer(nodes_[size_t(uniform)].input(0), "Cast");
      const std::string& like = shaped < 0 ? nodes_[size_t(uniform)].input(0) : nodes_[size_t(shaped)].input(0);
      const int fill = mask_writer(like, "ConstantOfShape");
      const int expand = fill < 0 ? mask_writer(like, "Expand") : -1;
      const std::string shape = fill >= 0 ? nodes_[size_t(fill)].input(0) : expand >= 0 ? nodes_[size_t(expand)].input(1) : "";
      const bool per_sample = !shape.empty() && per_sample_shape(shape);
      const bool per_element = !shape.empty() && !x.empty() && whole_shape_of(shape, x);
      if (!per_sample && !per_element) continue;
      OnnxAttribute drop;
      drop.name = per_sample ? "p" : "ratio";
      drop.type = OnnxAttribute::Type::Float;
      drop.f = float(torch_complement_decimal(float(*q)));  // PyTorch's p, 0.2 from q = 0.8f
      if (per_sample) {
        replace(p, "StochasticDepth", {x}, {drop});
      } else {  // ONNX's own Dropout, its ratio an attribute (as before opset 12), which the importer reads
        OnnxNode& n = nodes_[size_t(p)];
        n.domain.clear();
        n.op_type = "Dropout";
        n.inputs = {x};
        n.attributes = {drop};
      }
      return true;
    }
    return false;
  }

  std::optional<double> scalar(const std::string& value) {
    const Folded* f = constants_.value(value);
    return f ? f->scalar() : std::nullopt;
  }

  ConstantFolder& constants_;
  std::vector<OnnxNode> nodes_;
  std::map<std::string, int> uses_;    // value -> readers (graph outputs count)
  std::map<std::string, int> reader_;  // value -> a reader (the one, where uses is 1)
  std::map<std::string, int> writer_;  // value -> the node writing it
  std::set<int> removed_;
};

}  // namespace

std::vector<OnnxNode> recognize_layout_patterns(std::vector<OnnxNode> nodes, const OnnxModel& model,
                                                ConstantFolder& constants) {
  return LayoutRecognizer(std::move(nodes), model, constants).run();
}

}  // namespace kiln::onnx_import

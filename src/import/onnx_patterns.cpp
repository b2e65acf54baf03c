#include "import/onnx_patterns.h"

#include "import/onnx_as_strided.h"
#include "import/onnx_pad_folding.h"
#include "import/onnx_layout_patterns.h"
#include "import/onnx_linear_weights.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace kiln::onnx_import {
namespace {

class Recognizer {
 public:
  Recognizer(const OnnxModel& model, const GraphOrder& order, ConstantFolder& constants) : constants_(constants) {
    for (int i : order.nodes) nodes_.push_back(model.nodes[size_t(i)]);
    for (size_t p = 0; p < nodes_.size(); ++p) {
      for (const std::string& out : nodes_[p].outputs) producer_[out] = int(p);
      for (const std::string& in : nodes_[p].inputs)
        if (!in.empty()) ++uses_[in], consumer_[in] = int(p);
    }
    for (const OnnxValueInfo& v : model.outputs) ++uses_[v.name];
  }

  std::vector<OnnxNode> run() {
    for (size_t p = 0; p < nodes_.size(); ++p) {
      if (removed_.count(int(p))) continue;
      if (is(nodes_[p], "Mul")) gated_activation(int(p));
      else if (is(nodes_[p], "Erf")) erf_gelu(int(p));
    }
    std::vector<OnnxNode> out;
    for (size_t p = 0; p < nodes_.size(); ++p)
      if (!removed_.count(int(p))) out.push_back(std::move(nodes_[p]));
    return out;
  }

 private:
  static bool is(const OnnxNode& n, const char* op) { return n.domain.empty() && n.op_type == op; }

  // The node at position p's only reader of its first output, or -1.
  int only_reader(int p) const {
    const std::string& out = nodes_[size_t(p)].outputs.at(0);
    const auto uses = uses_.find(out);
    if (uses == uses_.end() || uses->second != 1) return -1;
    const auto c = consumer_.find(out);
    return c == consumer_.end() ? -1 : c->second;
  }

  // The node writing `value` if `value` is read once (by the pattern) and it is not removed, else -1.
  int inner_producer(const std::string& value) const {
    const auto p = producer_.find(value);
    const auto u = uses_.find(value);
    if (p == producer_.end() || u == uses_.end() || u->second != 1 || removed_.count(p->second)) return -1;
    return p->second;
  }

  bool constant_near(const std::string& value, double target) {
    const Folded* f = constants_.value(value);
    const std::optional<double> v = f ? f->scalar() : std::nullopt;
    // Exporters write these in float32: 1 / sqrt(2) and 1/6 within its rounding.
    return v && std::abs(*v - target) <= 1e-6 * std::abs(target);
  }

  void replace(int p, const char* op, const std::string& x) {
    OnnxNode& n = nodes_[size_t(p)];
    n.domain = kKilnDomain;
    n.op_type = op;
    n.inputs = {x};
    n.attributes.clear();
  }

  // x * Sigmoid(x) and x * HardSigmoid(x) (PyTorch's hard-sigmoid: alpha 1/6, beta 1/2), either order.
  void gated_activation(int p) {
    const OnnxNode& mul = nodes_[size_t(p)];
    if (mul.inputs.size() != 2) return;
    for (int k = 0; k < 2; ++k) {
      const std::string &x = mul.inputs[size_t(k)], &gate = mul.inputs[size_t(1 - k)];
      const int g = inner_producer(gate);
      if (g < 0 || nodes_[size_t(g)].input(0) != x) continue;
      const OnnxNode& gn = nodes_[size_t(g)];
      if (is(gn, "Sigmoid")) {
        removed_.insert(g);
        replace(p, "Silu", x);
        return;
      }
      if (is(gn, "HardSigmoid")) {
        const OnnxAttribute *alpha = gn.attribute("alpha"), *beta = gn.attribute("beta");
        const double a = alpha ? alpha->f : 0.2, b = beta ? beta->f : 0.5;  // ONNX's defaults
        if (!(std::abs(a - 1.0 / 6.0) <= 1e-6 && std::abs(b - 0.5) <= 1e-6)) continue;  // NaN included
        removed_.insert(g);
        replace(p, "Hardswish", x);
        return;
      }
    }
  }

  // The values a product of Muls at p multiplies: its inputs, each inner Mul (read only here)
  // opened up, two levels deep at most (GELU's product has three factors); the inner Muls'
  // positions go to `inner`.
  void product_leaves(int p, std::vector<std::string>& leaves, std::vector<int>& inner, int depth = 0) const {
    for (const std::string& in : nodes_[size_t(p)].inputs) {
      const int q = inner_producer(in);
      if (depth < 2 && q >= 0 && is(nodes_[size_t(q)], "Mul") && nodes_[size_t(q)].inputs.size() == 2) {
        inner.push_back(q);
        product_leaves(q, leaves, inner, depth + 1);
      } else {
        leaves.push_back(in);
      }
    }
  }

  // x * 0.5 * (1 + Erf(x / sqrt(2))), found from its Erf node at e.
  void erf_gelu(int e) {
    const OnnxNode& erf = nodes_[size_t(e)];
    const int u = inner_producer(erf.input(0));
    if (u < 0 || nodes_[size_t(u)].inputs.size() != 2) return;
    const OnnxNode& scale = nodes_[size_t(u)];
    std::string x;
    if (is(scale, "Div") && constant_near(scale.inputs[1], std::sqrt(2.0))) x = scale.inputs[0];
    for (int k = 0; k < 2 && is(scale, "Mul"); ++k)
      if (constant_near(scale.inputs[size_t(1 - k)], 1.0 / std::sqrt(2.0))) x = scale.inputs[size_t(k)];
    if (x.empty()) return;
    const int a = only_reader(e);
    if (a < 0 || !is(nodes_[size_t(a)], "Add") || nodes_[size_t(a)].inputs.size() != 2) return;
    const OnnxNode& add = nodes_[size_t(a)];
    const std::string& erf_out = erf.outputs.at(0);
    const std::string& other = add.inputs[0] == erf_out ? add.inputs[1] : add.inputs[0];
    if (!constant_near(other, 1.0)) return;
    // The product's last Mul: the Add's reader, or the one after it ((1 + erf) * 0.5 first).
    int root = only_reader(a);
    for (int tries = 0; tries < 2 && root >= 0 && is(nodes_[size_t(root)], "Mul"); ++tries) {
      std::vector<std::string> leaves;
      std::vector<int> inner;
      product_leaves(root, leaves, inner);
      const std::string& one_plus = add.outputs.at(0);
      const auto count = [&](const std::string& v) { return std::count(leaves.begin(), leaves.end(), v); };
      const bool half = std::any_of(leaves.begin(), leaves.end(), [&](const std::string& v) {
        return v != x && v != one_plus && constant_near(v, 0.5);
      });
      if (leaves.size() == 3 && count(x) == 1 && count(one_plus) == 1 && half) {
        removed_.insert({u, e, a});
        removed_.insert(inner.begin(), inner.end());
        replace(root, "Gelu", x);
        return;
      }
      root = only_reader(root);
    }
  }

  ConstantFolder& constants_;
  std::vector<OnnxNode> nodes_;         // in order
  std::map<std::string, int> producer_; // value -> position in nodes_
  std::map<std::string, int> uses_;     // value -> readers (graph outputs count)
  std::map<std::string, int> consumer_; // value -> a reader (the one, where uses is 1)
  std::set<int> removed_;
};

}  // namespace

std::vector<OnnxNode> recognize_activation_patterns(const OnnxModel& model, const GraphOrder& order,
                                                    ConstantFolder& constants) {
  // The layout patterns after the activations': a LayerNorm's input may be a GELU's output; and
  // after nn.Linear's weights are read through their Transposes, so that a channels-last block's
  // MatMuls read stored matrices.
  std::vector<OnnxNode> nodes = read_linear_weights_through_transpose(Recognizer(model, order, constants).run(), constants);
  nodes = recognize_contiguous_as_strided(std::move(nodes), model, constants);
  nodes = fold_explicit_pads(std::move(nodes), model, constants);
  return recognize_layout_patterns(std::move(nodes), model, constants);
}

}  // namespace kiln::onnx_import

#include "import/onnx_constants.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln::onnx_import {
namespace {

constexpr int64_t kLargestFolded = 65536;  // elements: a weight, not a shape or a scalar
constexpr int kDeepest = 64;               // nodes a folded value may be computed through

Folded folded_tensor(const OnnxTensor& t) {
  Folded f;
  f.dims = t.dims;
  f.floating = t.floating;
  if (t.floating) {
    f.floats = t.values();
  } else {
    for (int64_t v : t.ints) f.ints.push_back(FoldedInt::number(v));
  }
  return f;
}

// An axis in [-rank, rank) as a position in [0, rank), or nullopt.
std::optional<int64_t> axis_in(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

// The axes of an Unsqueeze, Squeeze or Slice: the attribute (older opsets) or the input at `k`.
std::optional<std::vector<int64_t>> axes_of(const OnnxNode& node, size_t k, const std::function<const Folded*(const std::string&)>& value) {
  if (const OnnxAttribute* a = node.attribute("axes")) return a->ints;
  if (node.input(k).empty()) return std::vector<int64_t>{};
  const Folded* f = value(node.input(k));
  if (!f) return std::nullopt;
  return f->numbers();
}

// `x` as the element kind `floating` names: what Cast and CastLike compute.
std::optional<Folded> cast_to(const Folded& x, bool floating) {
  Folded f;
  f.dims = x.dims;
  f.floating = floating;
  if (f.floating == x.floating) {
    f.floats = x.floats, f.ints = x.ints;
  } else if (f.floating) {
    const std::optional<std::vector<int64_t>> v = x.numbers();
    if (!v) return std::nullopt;
    f.floats.assign(v->begin(), v->end());
  } else {
    for (double v : x.floats) {
      if (!std::isfinite(v) || std::abs(v) > 9e18) return std::nullopt;
      f.ints.push_back(FoldedInt::number(int64_t(std::trunc(v))));
    }
  }
  return f;
}

// The dimensions a Reshape to `target` gives `x` (ONNX's rules: one -1 inferred, 0 copies the
// input's dimension unless allowzero), or nullopt.
std::optional<Shape> reshaped(const Folded& x, const std::vector<int64_t>& target, bool allowzero) {
  Shape out;
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t d = target[i];
    if (d == 0 && !allowzero) {
      if (i >= x.dims.size()) return std::nullopt;
      d = x.dims[i];
    }
    if (d == -1) {
      if (inferred >= 0) return std::nullopt;
      inferred = int(i);
      out.push_back(1);
      continue;
    }
    if (d < 0 || d > kLargestFolded) return std::nullopt;
    known *= d;
    if (known > kLargestFolded) return std::nullopt;
    out.push_back(d);
  }
  if (inferred >= 0) {
    if (known == 0 || x.count() % known != 0) return std::nullopt;
    out[size_t(inferred)] = x.count() / known;
  }
  if (numel(out) != x.count()) return std::nullopt;
  return out;
}

// `x` broadcast against `shape` as Expand does (numpy's rules, aligned at the last dimension), or
// nullopt where they do not broadcast or the result would be a weight's size.
std::optional<Folded> expanded(const Folded& x, const std::vector<int64_t>& shape) {
  const size_t rank = std::max(x.dims.size(), shape.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t a = i + x.dims.size() >= rank ? x.dims[i + x.dims.size() - rank] : 1;
    const int64_t b = i + shape.size() >= rank ? shape[i + shape.size() - rank] : 1;
    if (a < 0 || b < 0 || (a != b && a != 1 && b != 1)) return std::nullopt;
    out[i] = a == 1 ? b : a;
    if (out[i] > kLargestFolded) return std::nullopt;
  }
  if (numel(out) > kLargestFolded) return std::nullopt;
  Folded f;
  f.dims = out;
  f.floating = x.floating;
  const int64_t n = numel(out);
  for (int64_t flat = 0; flat < n; ++flat) {
    // The element of x this output element reads: each broadcast dimension reads index 0.
    int64_t rest = flat, from = 0, stride = 1;
    for (size_t i = rank; i-- > 0;) {
      const int64_t at = rest % out[i];
      rest /= out[i];
      if (i + x.dims.size() >= rank) {
        const int64_t d = x.dims[i + x.dims.size() - rank];
        from += (d == 1 ? 0 : at) * stride;
        stride *= d;
      }
    }
    if (f.floating) f.floats.push_back(x.floats[size_t(from)]);
    else f.ints.push_back(x.ints[size_t(from)]);
  }
  return f;
}

// x `op` y (Div, Mul, Add, Sub) elementwise, one of them a single value or both of one count, as
// ONNX computes it: integer division truncates. A batch or unknown element gives an unknown one
// (the batch times or over 1 stays the batch); division by zero, nothing.
std::optional<Folded> arithmetic(const std::string& op, const Folded& x, const Folded& y) {
  if (x.floating != y.floating || (x.count() != y.count() && x.count() != 1 && y.count() != 1)) return std::nullopt;
  const Folded& big = x.count() >= y.count() ? x : y;
  Folded f;
  f.dims = big.dims;
  f.floating = x.floating;
  const int64_t n = big.count();
  for (int64_t i = 0; i < n; ++i) {
    const size_t a = x.count() == 1 ? 0 : size_t(i), b = y.count() == 1 ? 0 : size_t(i);
    if (f.floating) {
      const double u = x.floats[a], v = y.floats[b];
      f.floats.push_back(op == "Div" ? u / v : op == "Mul" ? u * v : op == "Add" ? u + v : u - v);
      continue;
    }
    const FoldedInt &u = x.ints[a], &v = y.ints[b];
    const bool numbers = u.kind == FoldedInt::Kind::Number && v.kind == FoldedInt::Kind::Number;
    if (!numbers) {
      const bool by_one = v.kind == FoldedInt::Kind::Number && v.value == 1 && (op == "Div" || op == "Mul");
      f.ints.push_back(by_one ? u : FoldedInt::unknown());
      continue;
    }
    if (op == "Div" && v.value == 0) return std::nullopt;
    const __int128 r = op == "Div" ? __int128(u.value) / v.value
                       : op == "Mul" ? __int128(u.value) * v.value
                       : op == "Add" ? __int128(u.value) + v.value
                                     : __int128(u.value) - v.value;
    if (r > INT64_MAX || r < INT64_MIN) return std::nullopt;
    f.ints.push_back(FoldedInt::number(int64_t(r)));
  }
  return f;
}

}  // namespace

std::optional<double> Folded::scalar() const {
  if (count() != 1) return std::nullopt;
  if (floating) return floats.at(0);
  if (ints.at(0).kind != FoldedInt::Kind::Number) return std::nullopt;
  return double(ints[0].value);
}

std::optional<std::vector<int64_t>> Folded::numbers() const {
  std::vector<int64_t> out;
  if (floating) {
    for (double v : floats) {
      if (v != std::trunc(v)) return std::nullopt;
      out.push_back(int64_t(v));
    }
    return out;
  }
  for (const FoldedInt& v : ints) {
    if (v.kind != FoldedInt::Kind::Number) return std::nullopt;
    out.push_back(v.value);
  }
  return out;
}

std::optional<OnnxTensor> constant_node_tensor(const OnnxNode& node) {
  OnnxTensor t;
  t.name = node.outputs.empty() ? node.name : node.outputs[0];
  for (const OnnxAttribute& a : node.attributes) {
    if (a.name == "value" && a.tensor) {
      const std::string name = t.name;
      t = *a.tensor;
      t.name = name;
      return t;
    }
    if (a.name == "value_float" || a.name == "value_floats") {
      t.floating = true, t.dtype = DType::F32, t.elem_type = kOnnxFloat;
      const std::vector<float> v = a.name == "value_float" ? std::vector<float>{a.f} : a.floats;
      if (a.name == "value_floats") t.dims = {int64_t(v.size())};
      t.data.resize(v.size() * sizeof(float));
      if (!v.empty()) std::memcpy(t.data.data(), v.data(), t.data.size());
      return t;
    }
    if (a.name == "value_int" || a.name == "value_ints") {
      t.integer = true, t.elem_type = 7;  // INT64
      t.ints = a.name == "value_int" ? std::vector<int64_t>{a.i} : a.ints;
      if (a.name == "value_ints") t.dims = {int64_t(t.ints.size())};
      return t;
    }
  }
  return std::nullopt;
}

ConstantFolder::ConstantFolder(const OnnxModel& model, const GraphOrder& order, ShapeOf shape_of)
    : model_(model), order_(order), shape_of_(std::move(shape_of)) {
  for (const OnnxTensor& t : model.initializers) stored_[t.name] = &t;
  for (const OnnxNode& n : model.nodes) {
    if (n.op_type != "Constant" || !n.domain.empty() || n.outputs.empty()) continue;
    if (std::optional<OnnxTensor> t = constant_node_tensor(n)) {
      const std::string out = n.outputs[0];
      stored_[out] = &(constant_nodes_[out] = std::move(*t));
    }
  }
  // An Identity of a stored tensor is that tensor (exporters write one where a parameter is read
  // under another name), in the graph's order, so chains of them resolve too.
  for (int i : order.nodes) {
    const OnnxNode& n = model.nodes[size_t(i)];
    if (n.op_type != "Identity" || !n.domain.empty() || n.outputs.empty()) continue;
    if (const auto it = stored_.find(n.input(0)); it != stored_.end()) stored_[n.outputs[0]] = it->second;
  }
}

bool ConstantFolder::folds(const OnnxNode& node) {
  if (!node.domain.empty()) return false;
  // Reshape, Expand and CastLike too: the dynamo exporter computes a bias=False convolution's zero
  // bias (Expand of a CastLike zero to Shape(weight)[0:1]) and view(N, -1)'s shape through them.
  // Div, Mul, Add and Sub of shape values: PyTorch's TorchScript exporter computes
  // x.size(1) // groups so (torchvision's channel_shuffle).
  for (const char* op : {"Constant", "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "CastLike", "Slice",
                         "Identity", "Reshape", "Expand", "Div", "Mul", "Add", "Sub"})
    if (node.op_type == op) return true;
  return false;
}

const OnnxTensor* ConstantFolder::stored(const std::string& name) const {
  const auto it = stored_.find(name);
  return it == stored_.end() ? nullptr : it->second;
}

const Folded* ConstantFolder::value(const std::string& name) { return value_at(name, 0); }

const Folded* ConstantFolder::value_at(const std::string& name, int depth) {
  if (name.empty()) return nullptr;
  auto it = memo_.find(name);
  if (it == memo_.end() || (!it->second.value && it->second.generation != generation_)) {
    std::optional<Folded> v = compute(name, depth);
    it = memo_.insert_or_assign(name, Memo{std::move(v), generation_}).first;
  }
  return it->second.value ? &*it->second.value : nullptr;
}

std::optional<Folded> ConstantFolder::compute(const std::string& name, int depth) {
  if (const OnnxTensor* t = stored(name)) {
    if (t->count() > kLargestFolded || (!t->floating && !t->integer)) return std::nullopt;
    return folded_tensor(*t);
  }
  const auto producer = order_.producer.find(name);
  if (producer == order_.producer.end() || depth > kDeepest) return std::nullopt;
  const OnnxNode& node = model_.nodes[size_t(producer->second)];
  if (!folds(node) || node.outputs.empty() || node.outputs[0] != name) return std::nullopt;
  return compute_node(node, depth);
}

std::optional<Folded> ConstantFolder::compute_node(const OnnxNode& node, int depth) {
  const auto input = [&](const std::string& n) { return value_at(n, depth + 1); };
  const std::string& op = node.op_type;
  if (op == "Shape") {
    // A stored tensor's dimensions are its own (the dynamo exporter sizes a bias=False convolution's
    // zero bias by Shape(weight)); a feature map's are what the importer knows of it.
    std::optional<std::vector<FoldedInt>> dims;
    if (const OnnxTensor* t = stored(node.input(0))) {
      dims.emplace();
      for (int64_t d : t->dims) dims->push_back(FoldedInt::number(d));
    } else if (shape_of_) {
      dims = shape_of_(node.input(0));
    }
    if (!dims) return std::nullopt;
    const int64_t rank = int64_t(dims->size());
    int64_t start = 0, end = rank;
    if (const OnnxAttribute* a = node.attribute("start")) start = std::clamp(a->i < 0 ? a->i + rank : a->i, int64_t(0), rank);
    if (const OnnxAttribute* a = node.attribute("end")) end = std::clamp(a->i < 0 ? a->i + rank : a->i, int64_t(0), rank);
    Folded f;
    f.ints.assign(dims->begin() + start, dims->begin() + std::max(start, end));
    f.dims = {int64_t(f.ints.size())};
    return f;
  }
  const Folded* x = input(node.input(0));
  if (!x) return std::nullopt;
  if (op == "Identity") return *x;
  if (op == "Cast") {
    const OnnxAttribute* to = node.attribute("to");
    if (!to) return std::nullopt;
    return cast_to(*x, to->i == 1 || to->i == 10 || to->i == 11 || to->i == 16);  // FLOAT, FLOAT16, DOUBLE, BFLOAT16
  }
  if (op == "CastLike") {
    // To the element type of input 1: a constant's, or a feature map's, which is floating point
    // (kiln reads float models).
    const Folded* like = input(node.input(1));
    return cast_to(*x, like ? like->floating : true);
  }
  if (op == "Div" || op == "Mul" || op == "Add" || op == "Sub") {
    const Folded* y = input(node.input(1));
    if (!y) return std::nullopt;
    return arithmetic(op, *x, *y);
  }
  if (op == "Reshape" || op == "Expand") {
    const Folded* shape = input(node.input(1));
    if (!shape) return std::nullopt;
    const std::optional<std::vector<int64_t>> target = shape->numbers();
    if (!target || shape->dims.size() != 1) return std::nullopt;
    if (op == "Expand") return expanded(*x, *target);
    const OnnxAttribute* allowzero = node.attribute("allowzero");
    const std::optional<Shape> dims = reshaped(*x, *target, allowzero && allowzero->i != 0);
    if (!dims) return std::nullopt;
    Folded f = *x;
    f.dims = *dims;
    return f;
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    const std::optional<std::vector<int64_t>> axes = axes_of(node, 1, input);
    if (!axes) return std::nullopt;
    Folded f = *x;
    if (op == "Unsqueeze") {
      const int64_t rank = int64_t(x->dims.size() + axes->size());
      std::vector<bool> added(size_t(rank), false);
      for (int64_t a : *axes) {
        const std::optional<int64_t> at = axis_in(a, rank);
        if (!at || added[size_t(*at)]) return std::nullopt;
        added[size_t(*at)] = true;
      }
      f.dims.clear();
      size_t next = 0;
      for (int64_t i = 0; i < rank; ++i) f.dims.push_back(added[size_t(i)] ? 1 : x->dims.at(next++));
    } else {
      const int64_t rank = int64_t(x->dims.size());
      std::vector<bool> removed(size_t(rank), axes->empty());
      for (int64_t a : *axes) {
        const std::optional<int64_t> at = axis_in(a, rank);
        if (!at) return std::nullopt;
        removed[size_t(*at)] = true;
      }
      f.dims.clear();
      for (int64_t i = 0; i < rank; ++i)
        if (!removed[size_t(i)] || x->dims[size_t(i)] != 1) f.dims.push_back(x->dims[size_t(i)]);
    }
    return f;
  }
  if (op == "Gather") {
    const Folded* indices = input(node.input(1));
    const OnnxAttribute* axis = node.attribute("axis");
    if (!indices || x->dims.size() != 1 || (axis && axis->i != 0 && axis->i != -1)) return std::nullopt;
    const std::optional<std::vector<int64_t>> at = indices->numbers();
    if (!at || indices->dims.size() > 1) return std::nullopt;
    Folded f;
    f.dims = indices->dims;
    f.floating = x->floating;
    for (int64_t i : *at) {
      const std::optional<int64_t> k = axis_in(i, x->count());
      if (!k) return std::nullopt;
      if (x->floating) f.floats.push_back(x->floats[size_t(*k)]);
      else f.ints.push_back(x->ints[size_t(*k)]);
    }
    return f;
  }
  if (op == "Concat") {
    Folded f;
    f.floating = x->floating;
    for (const std::string& in : node.inputs) {
      const Folded* part = input(in);
      if (!part || part->dims.size() != 1 || part->floating != f.floating) return std::nullopt;
      f.floats.insert(f.floats.end(), part->floats.begin(), part->floats.end());
      f.ints.insert(f.ints.end(), part->ints.begin(), part->ints.end());
    }
    f.dims = {int64_t(f.floating ? f.floats.size() : f.ints.size())};
    return f;
  }
  if (op == "Slice") {
    if (x->dims.size() != 1) return std::nullopt;
    // starts, ends (and axes, steps) as inputs from opset 10, attributes before.
    auto list = [&](const char* attribute, size_t k) -> std::optional<std::vector<int64_t>> {
      if (const OnnxAttribute* a = node.attribute(attribute)) return a->ints;
      if (node.input(k).empty()) return std::vector<int64_t>{};
      const Folded* v = input(node.input(k));
      if (!v) return std::nullopt;
      return v->numbers();
    };
    const auto starts = list("starts", 1), ends = list("ends", 2), axes = list("axes", 3), steps = list("steps", 4);
    if (!starts || !ends || !axes || !steps || starts->size() != 1 || ends->size() != 1) return std::nullopt;
    if (!axes->empty() && (axes->size() != 1 || (axes->at(0) != 0 && axes->at(0) != -1))) return std::nullopt;
    const int64_t step = steps->empty() ? 1 : steps->at(0), n = x->count();
    if (step != 1) return std::nullopt;  // shapes are sliced forwards
    const auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t(0), n); };
    const int64_t begin = clamp(starts->at(0)), end = std::max(begin, clamp(ends->at(0)));
    Folded f;
    f.floating = x->floating;
    if (f.floating) f.floats.assign(x->floats.begin() + begin, x->floats.begin() + end);
    else f.ints.assign(x->ints.begin() + begin, x->ints.begin() + end);
    f.dims = {end - begin};
    return f;
  }
  return std::nullopt;  // Constant: stored already, or of a form kiln does not read
}

}  // namespace kiln::onnx_import

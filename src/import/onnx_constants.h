#pragma once
// The constants of an ONNX graph, evaluated at import: initializers, Constant nodes, and the small
// subgraphs exporters write to compute a Reshape's target shape from its input's (Shape -> Gather
// -> Unsqueeze -> Concat for PyTorch's x.view(x.size(0), -1)), and the Cast, Squeeze, Slice and
// Identity nodes around them. The batch size is a value of its own here: kiln chooses it when it
// compiles, so a shape that holds it holds "the batch", not the file's number.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "import/onnx_graph_order.h"
#include "import/onnx_model.h"

namespace kiln::onnx_import {

// One element of a folded integer tensor.
struct FoldedInt {
  enum class Kind { Number, Batch, Unknown };
  Kind kind = Kind::Number;
  int64_t value = 0;  // a Number's
  static FoldedInt number(int64_t v) { return {Kind::Number, v}; }
  static FoldedInt batch() { return {Kind::Batch, 0}; }
  static FoldedInt unknown() { return {Kind::Unknown, 0}; }
};

struct Folded {
  Shape dims;
  bool floating = false;
  std::vector<double> floats;   // floating
  std::vector<FoldedInt> ints;  // else
  int64_t count() const { return numel(dims); }
  // The one value of a single-element numeric tensor (of any rank), if it is one.
  std::optional<double> scalar() const;
  // The elements as numbers, if every one is.
  std::optional<std::vector<int64_t>> numbers() const;
};

class ConstantFolder {
 public:
  // What a Shape node reads of a value: its dimensions (the batch and unknown sizes marked), or
  // nothing where they are not known (before the graph is mapped, for the pattern recognizers).
  using ShapeOf = std::function<std::optional<std::vector<FoldedInt>>(const std::string& value)>;
  ConstantFolder(const OnnxModel& model, const GraphOrder& order, ShapeOf shape_of);

  // The value of `name` where the file fixes it: an initializer or Constant node's (up to 65536
  // elements: larger ones are weights, never folded), or the output of a node of the kinds above
  // whose inputs are such values; nullptr otherwise.
  const Folded* value(const std::string& name);
  // The initializer or Constant node's tensor named `name` (or that an Identity node passes on, under
  // its own name), else nullptr.
  const OnnxTensor* stored(const std::string& name) const;

  // Whether nodes of this type are evaluated here (and so map to no layer).
  static bool folds(const OnnxNode& node);

  // What shape_of answers may have grown (the importer mapped another value): a value that could
  // not be computed before is computed again when next asked; those computed stay.
  void shapes_changed() { ++generation_; }

 private:
  std::optional<Folded> compute(const std::string& name, int depth);
  std::optional<Folded> compute_node(const OnnxNode& node, int depth);
  const Folded* value_at(const std::string& name, int depth);

  const OnnxModel& model_;
  const GraphOrder& order_;
  ShapeOf shape_of_;
  std::map<std::string, OnnxTensor> constant_nodes_;  // the Constant nodes' values, by output
  std::map<std::string, const OnnxTensor*> stored_;    // those and the initializers
  struct Memo {
    std::optional<Folded> value;
    uint64_t generation = 0;  // of a value that could not be computed: when it was tried
  };
  std::map<std::string, Memo> memo_;
  uint64_t generation_ = 0;
};

// A Constant node's value as a tensor named `name` (its `value` attribute, or value_float(s) /
// value_int(s)); nullopt for another form (sparse, strings).
std::optional<OnnxTensor> constant_node_tensor(const OnnxNode& node);

}  // namespace kiln::onnx_import

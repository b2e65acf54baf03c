#include "import/onnx_import_context.h"

#include <fmt/format.h>

#include <cstring>

#include "kiln/error.h"

namespace kiln::onnx_import {

NamedTensor named_tensor(const OnnxTensor& t) {
  NamedTensor n;
  n.name = t.name;
  n.dtype = t.dtype;
  n.shape = t.dims;
  n.data = t.data;
  return n;
}

NamedTensor transposed(const OnnxTensor& t) {
  NamedTensor out = named_tensor(t);
  const int64_t rows = t.dims.at(0), cols = t.dims.at(1);
  const size_t e = dtype_size(t.dtype);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(out.data.data() + size_t(c * rows + r) * e, t.data.data() + size_t(r * cols + c) * e, e);
  out.shape = {cols, rows};
  return out;
}

ImportContext::ImportContext(const OnnxModel& model, const GraphOrder& order, std::vector<OnnxNode> nodes,
                             Blueprint& blueprint)
    : model_(model), nodes_(std::move(nodes)), blueprint_(blueprint) {
  // A Shape node reads only its input's dimensions: what the importer knows of each mapped value.
  folder_ = std::make_unique<ConstantFolder>(model, order, [this](const std::string& value) {
    std::optional<std::vector<FoldedInt>> dims;
    const auto it = values_.find(value);
    if (it == values_.end()) return dims;
    const MappedValue& v = it->second;
    const FoldedInt channels = v.channels > 0 ? FoldedInt::number(v.channels) : FoldedInt::unknown();
    dims = std::vector<FoldedInt>{FoldedInt::batch(), channels};
    if (v.one_by_one) dims->insert(dims->end(), {FoldedInt::number(1), FoldedInt::number(1)});
    else if (v.form == Form::Map) dims->insert(dims->end(), {FoldedInt::unknown(), FoldedInt::unknown()});
    return dims;
  });
  for (const std::string& in : data_inputs(model)) data_.insert(in);
  for (const OnnxValueInfo& v : model.outputs) outputs_.insert(v.name);
  for (size_t p = 0; p < nodes_.size(); ++p) {
    const OnnxNode& n = nodes_[p];
    for (const std::string& in : n.inputs)
      if (!in.empty()) readers_[in].push_back(int(p));
    // Shape reads only the dimensions, which the import fixes: its result is a constant.
    if (n.op_type != "Shape" && reads_data(n))
      for (const std::string& out : n.outputs) data_.insert(out);
  }
}

bool ImportContext::reads_data(const OnnxNode& node) const {
  // CastLike reads only the element type of its second input (the dynamo exporter casts constants
  // "like" a feature map): its value is its first input's.
  if (node.op_type == "CastLike" && node.domain.empty()) return is_data(node.input(0));
  for (const std::string& in : node.inputs)
    if (is_data(in)) return true;
  return false;
}

const MappedValue& ImportContext::input(const OnnxNode& node, size_t k) const {
  const std::string& name = node.input(k);
  const auto it = values_.find(name);
  if (it == values_.end())
    fail("'{}': {} reads '{}' as its input {}, which is {}: kiln's layers read feature maps computed from the "
         "model's input here", path(), node_label(node), name, k, name.empty() ? "left out" : "a constant");
  return it->second;
}

void ImportContext::set(const std::string& value, const MappedValue& v) {
  values_.insert_or_assign(value, v);
  folder_->shapes_changed();  // a Shape of this value may now fold
}

const std::vector<int>& ImportContext::readers(const std::string& value) const {
  static const std::vector<int> none;
  const auto it = readers_.find(value);
  return it == readers_.end() ? none : it->second;
}

bool ImportContext::is_output(const std::string& value) const { return outputs_.count(value) > 0; }

std::optional<double> ImportContext::scalar_input(const OnnxNode& node, size_t k) {
  const Folded* f = constant(node.input(k));
  return f ? f->scalar() : std::nullopt;
}

const OnnxTensor& ImportContext::weight(const OnnxNode& node, size_t k, const char* what) const {
  std::vector<std::string> problems;
  check_weight(node, k, what, problems);
  if (!problems.empty()) fail("'{}': {}", path(), problems[0]);
  return *stored(node.input(k));
}

void ImportContext::check_weight(const OnnxNode& node, size_t k, const char* what,
                                 std::vector<std::string>& problems) const {
  const std::string& name = node.input(k);
  const OnnxTensor* t = stored(name);
  if (name.empty()) {
    problems.push_back(fmt::format("{} has no input {} ({}); kiln's layer needs it", node_label(node), k, what));
  } else if (!t) {
    problems.push_back(fmt::format(
        "{} reads {} (input {}) from '{}', which is computed in the graph, not stored in the file: kiln trains a "
        "layer's parameters from initializers (torch.onnx.export stores them so with do_constant_folding=True)",
        node_label(node), what, k, name));
  } else if (!t->floating) {
    problems.push_back(fmt::format("{} reads {} from '{}', of ONNX element type {}, not floating point: kiln trains "
                                   "float32 (F16, BF16, F64 weights load too); export the float model, not a "
                                   "quantized one", node_label(node), what, name, t->elem_type));
  }
}

void ImportContext::add_weight(const OnnxNode& node, const std::string& kiln_tensor, NamedTensor tensor) {
  const auto [it, fresh] = weight_reader_.emplace(tensor.name, node_label(node));
  if (!fresh)
    fail("'{}': the initializer '{}' is a parameter of both {} and {}: kiln gives each layer parameters of its own, "
         "so shared (tied) weights cannot train as one; export the model with the weights untied",
         path(), tensor.name, it->second, node_label(node));
  kiln_tensors_[tensor.name] = kiln_tensor;
  weights_.push_back(std::move(tensor));
}

void ImportContext::produce(const OnnxNode& node, Form form, int64_t channels, bool one_by_one) {
  set(node.outputs.at(0), {blueprint_.last(), form, channels, one_by_one});
}

const std::string& ImportContext::layer_name(const OnnxNode& node) {
  auto it = names_.find(&node);
  if (it == names_.end()) {
    const std::string fallback = node.outputs.empty() ? std::string() : node.outputs[0];
    it = names_.emplace(&node, name_pool_.claim(name_from_node(node.scope.empty() ? node.name : node.scope, node.op_type, fallback))).first;
  }
  return it->second;
}

void ImportContext::reserve_name(const OnnxNode& node, const std::string& name) {
  names_[&node] = name_pool_.claim(name);
}

}  // namespace kiln::onnx_import

#include "export/onnx_graph.h"

#include <fmt/format.h>

namespace kiln::onnx_export {

std::string GraphWriter::node(const std::string& op_type, std::vector<std::string> inputs,
                                     const std::string& output, std::vector<Attribute> attributes) {
  Node n;
  n.op_type = op_type;
  n.name = output;  // outputs are unique, so they name their nodes too
  n.inputs = std::move(inputs);
  n.outputs = {output};
  n.attributes = std::move(attributes);
  graph_.nodes.push_back(std::move(n));
  return output;
}

std::string GraphWriter::scalar(float value) {
  auto it = scalars_.find(value);
  if (it != scalars_.end()) return it->second;
  std::string name = fmt::format("scalar:{}", scalars_.size());
  initializer(name, {}, {value});
  scalars_.emplace(value, name);
  return name;
}

void GraphWriter::initializer(std::string name, Shape shape, std::vector<float> values) {
  graph_.initializers.push_back({std::move(name), std::move(shape), std::move(values)});
}

}  // namespace kiln::onnx_export

#pragma once
// Which of an ONNX graph's nodes compute its output, in what order: the nodes the output depends
// on (others are left out: an exporter may leave dead nodes behind), each after the nodes writing
// its inputs, in the file's order wherever the file's is such an order (ONNX requires it; kiln's
// layers then follow the file's nodes, so an exported kiln model comes back in its own order). The
// graph's checks come with it: a value written twice, a value no node, initializer or input
// provides (a missing initializer), an output nothing computes, and a cycle.
#include <map>
#include <string>
#include <vector>

#include "import/onnx_model.h"

namespace kiln::onnx_import {

struct GraphOrder {
  std::vector<int> nodes;               // indices into OnnxModel::nodes, producers first
  std::map<std::string, int> producer;  // each node output -> its node's index (every node)
};

// The order of the nodes that `outputs` (graph output names) depend on. A kiln::Error naming the
// file, the node and the value for each fault above (every missing value listed at once).
GraphOrder order_graph(const OnnxModel& model, const std::vector<std::string>& outputs);

// The names of the graph's real inputs: its declared inputs that are not initializers.
std::vector<std::string> data_inputs(const OnnxModel& model);

}  // namespace kiln::onnx_import

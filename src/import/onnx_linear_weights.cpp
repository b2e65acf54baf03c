#include "import/onnx_linear_weights.h"

#include <map>
#include <string>

namespace kiln::onnx_import {
namespace {

bool is(const OnnxNode& n, const char* op) { return n.domain.empty() && n.op_type == op; }

// A Transpose swapping a matrix's two axes: perm (1, 0), or no perm (ONNX's default reverses them).
bool swaps_matrix_axes(const OnnxNode& n) {
  const OnnxAttribute* perm = n.attribute("perm");
  return !perm || perm->ints == std::vector<int64_t>{1, 0};
}

}  // namespace

bool weight_out_in(const OnnxNode& node) {
  const OnnxAttribute* a = node.attribute(kWeightOutIn);
  return a && a->i == 1;
}

std::vector<OnnxNode> read_linear_weights_through_transpose(std::vector<OnnxNode> nodes, ConstantFolder& constants) {
  std::map<std::string, std::string> transposed_of;  // Transpose's output -> the stored (out, in) matrix
  for (const OnnxNode& n : nodes) {
    if (!is(n, "Transpose") || n.inputs.size() != 1 || n.outputs.empty() || !swaps_matrix_axes(n)) continue;
    const OnnxTensor* w = constants.stored(n.inputs[0]);
    if (w && w->floating && w->dims.size() == 2) transposed_of[n.outputs[0]] = n.inputs[0];
  }
  for (OnnxNode& n : nodes) {
    if (!is(n, "MatMul") || n.inputs.size() != 2) continue;
    const auto w = transposed_of.find(n.inputs[1]);
    if (w == transposed_of.end()) continue;
    n.inputs[1] = w->second;
    OnnxAttribute mark;
    mark.name = kWeightOutIn;
    mark.type = OnnxAttribute::Type::Int;
    mark.i = 1;
    n.attributes.push_back(mark);
  }
  return nodes;
}

}  // namespace kiln::onnx_import

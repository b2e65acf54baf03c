#pragma once
// nn.Linear as PyTorch's dynamo exporter writes it without its optimizer (torch.onnx.export(...,
// dynamo=True, optimize=False), PyTorch 2.9): MatMul (x, Transpose (W, perm (1, 0))), W the stored
// (out, in) weight, where other exporters store the product's (in, out) matrix itself. The MatMul
// is given W directly and marked so (kWeightOutIn): its handler (and LinearOverMap's, inside a
// channels-last block) reads W in nn.Linear's layout, no transposition needed, and names the layer
// after W as for any stored weight. The Transpose, read by nothing then, is a constant left unmapped.
#include <vector>

#include "import/onnx_constants.h"
#include "import/onnx_model.h"

namespace kiln::onnx_import {

// The attribute (INT 1) marking a MatMul (or the LinearOverMap made of it) whose input 1 is nn.Linear's
// (out, in) weight rather than ONNX's (in, out) matrix.
inline constexpr const char* kWeightOutIn = "kiln_weight_out_in";

// Whether `node`'s input 1 is held (out, in) (kWeightOutIn set).
bool weight_out_in(const OnnxNode& node);

// `nodes` with every MatMul reading Transpose (stored matrix, perm (1, 0)) as its input 1 reading the
// matrix, marked kWeightOutIn.
std::vector<OnnxNode> read_linear_weights_through_transpose(std::vector<OnnxNode> nodes, ConstantFolder& constants);

}  // namespace kiln::onnx_import

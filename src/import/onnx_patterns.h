#pragma once
// The activations exporters write as several nodes, recognized as the one activation they compute,
// so that kiln runs (and fuses) its own layer:
//   x * Sigmoid(x)                          -> SiLU       (PyTorch's nn.SiLU at opsets below 22)
//   x * HardSigmoid(x), alpha 1/6, beta 1/2 -> hard-swish (older exports of nn.Hardswish)
//   x * 0.5 * (1 + Erf(x / sqrt(2)))        -> GELU       (nn.GELU() below opset 20), the 0.5 and the
//                                              products in any order, x / sqrt(2) as x * (1 / sqrt(2))
// A match needs every inner value to be read only inside it (not by another node, not a graph
// output). The recognized nodes become one node of domain "kiln" (op types "Silu", "Hardswish",
// "Gelu") reading x, under the name and output of the last node of the pattern. The layout
// patterns (channel shuffle, LayerNorm over a map's channels, layer scale:
// import/onnx_layout_patterns.h) are recognized in the same pass, after these.
#include <vector>

#include "import/onnx_constants.h"
#include "import/onnx_graph_order.h"
#include "import/onnx_model.h"

namespace kiln::onnx_import {

inline constexpr const char* kKilnDomain = "kiln";

// The graph's nodes in `order`, with each pattern above and each layout pattern replaced by its one node.
std::vector<OnnxNode> recognize_activation_patterns(const OnnxModel& model, const GraphOrder& order,
                                                    ConstantFolder& constants);

}  // namespace kiln::onnx_import

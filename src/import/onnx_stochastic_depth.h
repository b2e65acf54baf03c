#pragma once
// kiln's own exports keep their stochastic depth layers as Identity nodes listed in the model's
// metadata (ops/elementwise/stochastic_depth_onnx.h); this turns each listed node into the kiln
// node "StochasticDepth" (attributes p and mode) that the layout patterns make of PyTorch's
// training-mode form, so one handler (onnx_ops_stochastic_depth.cpp) maps both.
#include <vector>

#include "import/onnx_model.h"

namespace kiln::onnx_import {

// Rewrites, in `nodes` (the graph's, patterns recognized), every Identity node the metadata entry
// lists. A malformed entry (not a JSON object, a p outside [0, 1), a mode other than "row", a name
// of no Identity node) is a kiln::Error naming the file, the key and the fix. Nothing without the
// entry.
void recognize_exported_stochastic_depth(std::vector<OnnxNode>& nodes, const OnnxModel& model);

}  // namespace kiln::onnx_import

#pragma once
// The import's checks that need the Blueprint's shapes (kiln's shape inference, compile's expand,
// at the import's input size and batch 1): a linear layer's input width against its weight, a
// Reshape's width, a flatten of a map of several positions read by anything but linear layers (ONNX
// flattens in C,H,W order, kiln in H,W,C: load_torch_weights reorders a linear layer's columns, and
// nothing else can be), and a pooling in ONNX's ceil mode before opset 19 that keeps a window kiln's
// (PyTorch's) rule drops. Each names the ONNX node and the fix.
#include "import/onnx_import_context.h"
#include "kiln/blueprint.h"
#include "kiln/layer_graph.h"

namespace kiln::onnx_import {

// The checks; returns the expanded graph they read (batch 1), for what else needs its shapes.
LayerGraph check_blueprint_shapes(const Blueprint& blueprint, const PendingChecks& checks, const OnnxModel& model);

}  // namespace kiln::onnx_import

#pragma once
// The layers kiln's exporter (and PyTorch's) writes as several nodes because ONNX's graph is NCHW,
// recognized as the one layer they compute, so that the handlers see one node:
//   Reshape (0, g, C/g, H, W) -> Transpose (0, 2, 1, 3, 4) [-> Identity] -> Reshape (0, C, H, W)
//       -> "ChannelShuffle" (attribute groups g; torchvision's channel_shuffle)
//   Transpose (0, 2, 3, 1) -> LayerNormalization (axis -1) -> Transpose (0, 3, 1, 2)
//       -> "LayerNorm2d" (x, scale, bias; the LayerNormalization's attributes; ConvNeXt's LayerNorm
//          over a map's channels, PyTorch's permute -> nn.LayerNorm -> permute)
//   Mul of a value computed in the graph and a stored tensor (C, 1, 1) or (C)
//       -> "LayerScale" (x, gamma; ConvNeXt's `self.layer_scale * x`)
//   MatMul (stored (out_h, H), MatMul (x, stored (W, out_w)))
//       -> "AdaptiveAvgPool" (x, rows, columns; kiln's export of an adaptive average pooling whose
//          sizes do not divide, the averaging matrices checked by the handler)
//   Reshape (0, g, -1) -> InstanceNormalization -> Reshape (x's shape) -> Mul (weight) -> Add (bias)
//       -> "GroupNorm" (x, weight, bias, the instance normalization's scale and bias; attributes
//          groups g and its epsilon; nn.GroupNorm as PyTorch's exporter and kiln's write it below
//          opset 18)
//   Mul (x, Div (Cast (Less (RandomUniformLike (t of shape (N, 1, 1, 1)), q)), q))
//       -> "StochasticDepth" (x; attribute p = 1 - q: torchvision's stochastic depth, "row" mode, as a
//          training-mode export writes it; the Cast may be a CastLike and t ConstantOfShape or Expand)
//   Transpose (0, 2, 3, 1) -> Flatten (axis 1)
//       -> "FlattenChannelsLast" (x; the flatten in kiln's H, W, C order, which kiln's exporter
//          writes so when a flattened map is read by a layer other than a linear one: a LayerNorm, or
//          the dropout before AlexNet's classifier)
// As for the activation patterns (import/onnx_patterns.h), every inner value must be read only
// inside the pattern; the new node has domain "kiln" and the last node's name and output.
#include <vector>

#include "import/onnx_constants.h"
#include "import/onnx_model.h"

namespace kiln::onnx_import {

// `nodes` (in the graph's order) with each pattern above replaced by its one node.
std::vector<OnnxNode> recognize_layout_patterns(std::vector<OnnxNode> nodes, const OnnxModel& model,
                                                ConstantFolder& constants);

}  // namespace kiln::onnx_import

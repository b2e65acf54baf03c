#pragma once
// Explicit padding folded into the layer that reads it: timm's padding='same' (TensorFlow's
// asymmetric SAME, Conv2dSame and MaxPool2dSame) and nn.ZeroPad2d before a convolution are written
// as Pad (mode constant, pads of the height and width only) -> Conv / MaxPool / AveragePool. Where
// the pads are constants (the dynamo exporter computes them at export; the TorchScript exporter
// computes timm's from Shape in the graph, which stays refused with its own message) and the padding
// value is what the reader's own padding means, the Pad goes and its amounts are added to the
// reader's pads:
//   value 0 -> Conv; value 0 -> AveragePool counting the padding (count_include_pad = 1, or no pads
//   of its own); value -inf (or the lowest float) -> MaxPool; a pooling only where its padding comes
//   out the same on all four sides (kiln's pooling kernels pad alike).
// Other readers of the Pad's output may only be CastLike nodes reading its type (the dynamo exporter's
// zero bias, cast like the convolution's input); they read the Pad's input instead.
#include <vector>

#include "import/onnx_constants.h"
#include "import/onnx_model.h"

namespace kiln::onnx_import {

std::vector<OnnxNode> fold_explicit_pads(std::vector<OnnxNode> nodes, const OnnxModel& model, ConstantFolder& constants);

}  // namespace kiln::onnx_import

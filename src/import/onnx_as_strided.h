#pragma once
// x.as_strided(size, stride) as PyTorch's dynamo exporter writes it unoptimized (ConvNeXt's
// AdaptiveAvgPool2d(1) decomposed at a map larger than 1x1: mean(keepdim) then as_strided of the
// (N, C, 1, 1) mean to itself): Gather (Reshape (x, [-1]), indices), the indices
//   offset + Unsqueeze (Range (0, size_0, 1) * stride_0, the other axes) + ... (one term per axis)
// Where the offset is 0, size_0 the batch and the strides are the sizes' contiguous ones, it reads
// every element of an (N, size_1, size_2, size_3) tensor in order: the node becomes
// "AsStridedContiguous" (x; attribute sizes, size_1..size_3), which its handler maps to x itself
// once x is seen to have that shape. Other as_strided forms stay a Gather (refused).
#include <vector>

#include "import/onnx_constants.h"
#include "import/onnx_model.h"

namespace kiln::onnx_import {

std::vector<OnnxNode> recognize_contiguous_as_strided(std::vector<OnnxNode> nodes, const OnnxModel& model,
                                                      ConstantFolder& constants);

}  // namespace kiln::onnx_import

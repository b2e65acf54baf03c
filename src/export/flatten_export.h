#pragma once
// The order the Flatten layer's ONNX form gives a feature map's values, which the linear layers
// reading it must match (flatten_export.cpp, linear_export.cpp).
#include "export/layer_export.h"

namespace kiln {

// The {H, W, C} of the map that Flatten layer `flatten` flattens in PyTorch's C,H,W order, where
// that differs from kiln's H,W,C: a map of more than one position whose every consumer is a linear
// layer (which then takes its columns in C,H,W order). {} otherwise: a flat input, one position, or
// a consumer that is not a linear layer (then the map is transposed to H,W,C first, as kiln reads it).
Shape onnx_chw_flattened_map(const ExportedGraph& graph, int flatten);

}  // namespace kiln

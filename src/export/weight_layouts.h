#pragma once
// kiln's weight layouts and PyTorch's (which ONNX shares), both ways round: convolution filters are
// KRSC in kiln and OIHW in PyTorch; a linear layer reading a flattened feature map takes its columns
// in kiln's H,W,C flatten order, PyTorch's in C,H,W. The exporters (ONNX and the state_dict) use
// these; load_torch_weights (src/train/torch_weights.cpp) does the reverse on its own.
#include <map>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/executable.h"
#include "kiln/layer_graph.h"

namespace kiln::export_layout {

// The values of tensor `name` of `exe` as float32 (float64 programs' values rounded), read from any
// device. A kiln::Error names a tensor that is missing, not floating point, or holds a NaN or an
// infinity (a diverged model is not exported).
std::vector<float> read_floats(Executable& exe, const std::string& name);

// A KRSC filter ([K, R, S, C]) in OIHW order; the shape is [K, C, R, S].
std::vector<float> krsc_to_oihw(const std::vector<float>& krsc, const Shape& krsc_shape);
inline Shape oihw_shape(const Shape& krsc) { return {krsc[0], krsc[3], krsc[1], krsc[2]}; }

// A [rows, H*W*C] matrix whose columns run H,W,C with columns reordered to C,H,W (`hwc` = {H, W, C}).
std::vector<float> hwc_columns_to_chw(const std::vector<float>& matrix, int64_t rows, const Shape& hwc);

// The linear layers that read a feature map of more than one position through a flatten, by weight
// name ("fc1.weight"), with that map's {H, W, C}: where the two flatten orders differ. The same rule
// as load_torch_weights'.
std::map<std::string, Shape> linear_layers_reading_maps(const LayerGraph& graph);

}  // namespace kiln::export_layout

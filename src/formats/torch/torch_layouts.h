#pragma once
// kiln's weight layouts and PyTorch's (which ONNX shares), both ways round: convolution filters are
// KRSC in kiln and OIHW in PyTorch; a linear layer reading a flattened feature map takes its columns
// in kiln's H,W,C flatten order, PyTorch's in C,H,W. load_torch_weights reads PyTorch's; the
// exporters (src/export/) write them.
#include <map>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/layer_graph.h"

namespace kiln::torch_layout {

// A KRSC filter ([K, R, S, C]) in OIHW order, whose shape is [K, C, R, S]; and back.
inline Shape oihw_shape(const Shape& krsc) { return {krsc[0], krsc[3], krsc[1], krsc[2]}; }
std::vector<float> krsc_to_oihw(const std::vector<float>& krsc, const Shape& krsc_shape);
std::vector<float> oihw_to_krsc(const std::vector<float>& oihw, const Shape& krsc_shape);

// A [rows, H*W*C] matrix with its columns reordered from H,W,C to C,H,W (`hwc` = {H, W, C}); and back.
std::vector<float> hwc_columns_to_chw(const std::vector<float>& matrix, int64_t rows, const Shape& hwc);
std::vector<float> chw_columns_to_hwc(const std::vector<float>& matrix, int64_t rows, const Shape& hwc);

// The Flatten layer whose features linear layer `linear` reads, directly or through layers that act
// on each feature alone and keep their order (dropout, ReLU, an activation, stochastic depth, which
// scales whole samples: AlexNet's classifier reads its flatten through a dropout); -1 when it reads
// none.
int flatten_read_by(const LayerGraph& graph, int linear);

// The linear layers that read a feature map of more than one position through a flatten
// (flatten_read_by), by weight name ("fc1.weight"), with that map's {H, W, C}: where the two
// flatten orders differ.
std::map<std::string, Shape> flattened_maps(const LayerGraph& graph);

}  // namespace kiln::torch_layout

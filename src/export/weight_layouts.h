#pragma once
// What both exporters (ONNX and the state_dict) need of a model's weights beyond their layouts
// (src/formats/torch/torch_layouts.h, shared with load_torch_weights).
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

}  // namespace kiln::export_layout

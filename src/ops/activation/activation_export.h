#pragma once
// The ONNX nodes of an elementwise activation (activation_export.cpp), for the layers that end in
// one: the Activation layer and the fused conv_bn_act.
#include <string>

#include "export/onnx_layer_writer.h"
#include "kiln/layer_vocabulary.h"

namespace kiln {

// The nodes of activation `a` (alpha as the layer's) from `x` to `y`, in opset 17's operators.
void write_activation(OnnxLayerWriter& out, Activation a, float alpha, const std::string& x, const std::string& y);

}  // namespace kiln

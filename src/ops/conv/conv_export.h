#pragma once
// A convolution's export, for the layers that hold one: Conv, and the fused CBR and conv_bn layers,
// whose convolution keeps its own name (<conv>.weight).
#include <string>
#include <vector>

#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {

// A Conv node of convolution `conv_name` (layer `l`'s ConvAttrs: its window, its bias) from `x`,
// then BatchNorm `bn_name` with `bn`'s epsilon and momentum, none when the name is empty (a fused
// layer's attributes hold its BatchNorm's, a Conv layer's do not): folded into the convolution's
// weight and bias (OnnxExportOptions::fold_bn) or a node of its own. The result is named `y`.
std::string onnx_conv_bn(OnnxLayerWriter& out, const Layer& l, const std::string& conv_name,
                         const std::string& bn_name, const BatchNormAttrs& bn, const std::string& x,
                         const std::string& y);

// Appends convolution `conv_name`'s filter (OIHW in PyTorch) and, when `bias`, its bias.
// `before_bn`: the convolution feeds a BatchNorm (TorchParam::zero_bias_before_bn).
void conv_torch_params(const std::string& conv_name, bool bias, bool before_bn, std::vector<TorchParam>& params);

// Appends a fused convolution + BatchNorm layer's tensors (CBR, conv_bn: l.conv_name's filter, which
// has no bias, then BatchNorm l.bn_name's), as declare_conv_bn_params declares them.
void fused_conv_bn_torch_params(const Layer& l, std::vector<TorchParam>& params);

}  // namespace kiln

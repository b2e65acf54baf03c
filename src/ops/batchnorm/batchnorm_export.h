#pragma once
// A BatchNorm's export, for the layers that hold one: the BatchNorm layer, and the fused CBR and
// conv_bn layers, whose BatchNorm keeps its own name (<bn>.weight, ...).
#include <string>
#include <vector>

#include "export/layer_export.h"
#include "export/onnx_layer_writer.h"

namespace kiln {

// A BatchNormalization node of BatchNorm `bn` (its tensors' prefix) with `attrs`' epsilon and
// momentum, from `x` to `y`, its scale, shift and running statistics as initializers; returns y.
// ONNX's momentum is the old statistics' weight, 1 - PyTorch's (kiln's) momentum: written always, so a
// BatchNorm of momentum 0.01 (MobileNetV3) or 3e-4 (MNASNet) trains as it did after an import.
std::string onnx_batch_norm(OnnxLayerWriter& out, const std::string& bn, const BatchNormAttrs& attrs,
                            const std::string& x, const std::string& y);

// Appends BatchNorm `bn`'s tensors in a state_dict's order: weight, bias, running_mean, running_var.
void batch_norm_torch_params(const std::string& bn, std::vector<TorchParam>& params);

}  // namespace kiln

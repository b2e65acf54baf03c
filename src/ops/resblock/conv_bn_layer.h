#pragma once
// What a conv_bn layer (conv_bn_layer.cpp) records for its consumer, the bn_add_relu layer that
// applies its normalization, and for its own backward.
#include "compile/layer_def.h"
#include "ops/resblock/resblock_contract.h"

namespace kiln {

struct ConvBnSaved {
  ConvBnForward<TensorId> fwd;
  ConvBnInference<TensorId> inf;
  TensorId weight;  // the master weight (the ops read its compute copy)
};

}  // namespace kiln

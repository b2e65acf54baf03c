#pragma once
// The attributes of a conv_bn_act layer (a fusion's, never written in a blueprint): the Conv's and
// the BatchNorm's it was fused from, and its activation (bn_act_functions.h's code and alpha).
// attrs_of<ConvAttrs> and attrs_of<BatchNormAttrs> find the parts, as in a CBR layer.
#include <string>
#include <tuple>

#include "kiln/layer_kind_attrs.h"
#include "ops/conv_bn_act/bn_act_functions.h"

namespace kiln {

struct ConvBnActAttrs {
  static constexpr const char* kName = "ConvBnActAttrs";
  ConvAttrs conv;  // bias false: BatchNorm's mean subtraction would cancel it
  BatchNormAttrs bn;
  int activation = bn_act::kReluCode;
  float alpha = 0.f;
  auto parts() const { return std::tie(conv, bn); }
};

}  // namespace kiln

#pragma once
// The layer graph's vocabulary: the kinds of layer and the elementwise activations (a layer's
// attributes are its kind's own struct, kiln/layer_kind_attrs.h, in the box of kiln/layer_attrs.h).
// Part of the IR (the bottom layer, with kiln/program.h and kiln/layer_graph.h): the model DSL
// (kiln/blueprint.h), the compiler and the kernels all speak it, so it depends on none of them.
#include <cstdint>
#include <string>

#include "kiln/activation_kinds.h"

namespace kiln {

enum class LayerKind : uint8_t {
  Input,
  Conv,
  BatchNorm,
  ReLU,
  CBR,  // fused Conv -> BatchNorm -> ReLU (the compiler fuses it; a Blueprint may also write it)
  MaxPool,
  AvgPool,
  GlobalAvgPool,
  Flatten,
  Linear,
  Dropout,
  Add,  // residual add of two inputs
  Activation,  // an elementwise activation other than ReLU (ActivationAttrs::activation says which)
  Concat,  // its inputs side by side along the channel axis (torch.cat(xs, dim=1))
  // The elementwise product of two inputs: of one shape, or a feature map and a per-channel gate
  // of shape N x 1 x 1 x C broadcast over its height and width (squeeze-and-excitation's s * x).
  Mul,
  AdaptiveAvgPool,  // PyTorch's AdaptiveAvgPool2d to a fixed output size (AdaptiveAvgPoolAttrs)
  // torchvision's StochasticDepth in "row" mode: in training each sample's whole input is dropped
  // with probability p and the rest scaled by 1 / (1 - p); the identity in inference.
  StochasticDepth,
  // PyTorch's nn.LayerNorm(C) over the channels of each position of a channels-last map (torchvision's
  // LayerNorm2d, and nn.LayerNorm after ConvNeXt's permute), or over the features of a row.
  LayerNorm,
  GroupNorm,  // PyTorch's nn.GroupNorm(groups, C): each sample's channels in groups, over H, W and the group
  // A learned per-channel multiply (torchvision ConvNeXt's `layer_scale * x`), one factor a channel.
  LayerScale,
  ChannelShuffle,  // torchvision ShuffleNetV2's channel_shuffle(x, groups)
  // A contiguous range of the input's channels (PyTorch's x.narrow(1, start, count); chunk(2, 1)'s halves).
  ChannelSlice,
  // Blueprint-only composites, expanded away by the compiler:
  Sequence,
  Residual,
  // The kinds the compiler's fusions add (the ResNet block ends, ...) count up from here. They
  // are not part of the model language: their families declare them (src/ir/fused_layer_kinds.h).
  FirstFused = 64,
};

const char* layer_kind_name(LayerKind kind);

// The elementwise activations besides ReLU (whose byte mask and CBR fusion make it a layer of
// its own), as PyTorch's functionals of the same names define them: kiln::Activation, written by
// the build from the activation family's list (src/ops/activation/activation_list.def), so adding
// one changes no header here.
const char* activation_name(Activation a);
// The activation named `name` (activation_name's names: "silu", "leaky_relu", ...); a kiln::Error
// listing the names otherwise.
Activation parse_activation(const std::string& name);

}  // namespace kiln

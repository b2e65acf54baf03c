#pragma once
// The layer graph's vocabulary: the kinds of layer, the elementwise activations and the layer
// attributes. Part of the IR (the bottom layer, with kiln/program.h and kiln/layer_graph.h): the
// model DSL (kiln/blueprint.h), the compiler and the kernels all speak it, so it depends on none
// of them.
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
  Activation,  // an elementwise activation other than ReLU (LayerAttrs::activation says which)
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

struct LayerAttrs {
  int out_channels = 0;  // Conv, CBR: output channels; Linear: output features
  int kernel = 0;        // Conv, CBR, pools: square kernel size
  int stride = 1;
  int padding = 0;
  bool bias = false;         // Conv, Linear
  float eps = 1e-5f;         // BatchNorm, CBR
  float momentum = 0.1f;     // BatchNorm, CBR: weight of the new batch in running stats
  float p = 0.f;             // Dropout probability
  bool first_layer = false;  // set by the compiler: an input is the data batch, so no dX of it is computed
  // Set by the compiler (CompileOptions::freeze): the layer runs as in inference (BN on its running
  // statistics, no dropout), has no backward, and the optimizer leaves its parameters alone.
  bool frozen = false;
  // Set by the compiler (CompileOptions::fuse_seams, src/compile/seams.cpp): seam_out, this CBR's
  // BatchNorm + ReLU output is never written, its consumers apply them as they read its convolution's
  // output; seam_in, this CBR or conv_bn is such a consumer.
  bool seam_out = false;
  bool seam_in = false;
  bool relu_after = true;    // Residual: apply ReLU after the add
  Activation activation = Activation::SiLU;  // Activation: which function
  float alpha = 0.f;                         // Activation: LeakyReLU's slope, ELU's alpha
  // Linear: > 0 draws the weight from N(0, init_std²) and starts the bias at 0 (torchvision's VGG
  // classifier, std 0.01); 0 keeps PyTorch's nn.Linear default, U(±1/sqrt(in)) for both.
  float init_std = 0.f;
};

}  // namespace kiln

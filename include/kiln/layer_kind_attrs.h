#pragma once
// The attributes of the model language's layer kinds, one struct per kind, as the model author
// writes them (the DSL's Blueprint::conv(ConvAttrs, name), ...). A layer holds its kind's struct
// in a kiln::LayerAttrs (kiln/layer_attrs.h); a kind without attributes (ReLU, Flatten, Add,
// GlobalAvgPool) holds none. Each check(where) refuses values that can never work, naming `where`
// ("conv 'stem'") and the fix; compile's expansion calls it once for every layer as it enters the
// graph. What a kernel does not support yet (a rectangular kernel, ...) is refused where the
// layer is lowered, not here: these describe the model, not the engine. Part of the IR.
#include <cstdint>
#include <string>
#include <tuple>

#include "kiln/activation_kinds.h"

namespace kiln {

// How a convolution's parameters start: torchvision's families differ.
enum class ConvInit : uint8_t {
  // Weight from N(0, 2 / (K x R x S)) (Kaiming normal, fan-out, ReLU's gain), bias 0: ResNet, VGG,
  // MobileNet, MNASNet, EfficientNet, RegNet.
  KaimingNormalFanOut,
  // nn.Conv2d's own reset_parameters: weight and bias from U(±1 / sqrt(C/groups x R x S)): AlexNet,
  // ShuffleNetV2.
  TorchDefault,
};

// A 2-D convolution (Conv; CBR's and conv_bn's through ConvBnAttrs), PyTorch's nn.Conv2d.
struct ConvAttrs {
  static constexpr const char* kName = "ConvAttrs";
  int out_channels = 0;
  int kernel_h = 0, kernel_w = 0;
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;  // must divide the input and output channels
  bool bias = false;
  ConvInit init = ConvInit::KaimingNormalFanOut;

  // A square kernel, one stride and the same padding on every side (what the DSL's conv() takes).
  static ConvAttrs square(int out_channels, int kernel, int stride = 1, int padding = 0, bool bias = false);
  void check(const std::string& where) const;
};

// BatchNorm (PyTorch's BatchNorm2d / BatchNorm1d).
struct BatchNormAttrs {
  static constexpr const char* kName = "BatchNormAttrs";
  float eps = 1e-5f;
  float momentum = 0.1f;  // weight of the new batch in the running statistics
  void check(const std::string& where) const;
};

// A convolution followed by BatchNorm: CBR (Conv -> BN -> ReLU; ReLU has no attributes) and the
// fused conv_bn of a ResNet block end, which is the same pair. get<ConvAttrs> and
// get<BatchNormAttrs> find its parts.
struct ConvBnAttrs {
  static constexpr const char* kName = "ConvBnAttrs";
  ConvAttrs conv;  // bias must be false: BatchNorm's mean subtraction cancels it
  BatchNormAttrs bn;
  auto parts() const { return std::tie(conv, bn); }
  void check(const std::string& where) const;
};

// Max and average pooling windows. Padding is at most half the kernel in each direction
// (PyTorch's rule: more would let a window see padding only).
struct PoolAttrs {
  static constexpr const char* kName = "PoolAttrs";
  int kernel_h = 0, kernel_w = 0;
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;

  static PoolAttrs square(int kernel, int stride, int padding = 0);
  void check(const std::string& where) const;
};

// A fully connected layer (fc, PyTorch's nn.Linear).
struct LinearAttrs {
  static constexpr const char* kName = "LinearAttrs";
  int out_features = 0;
  bool bias = true;
  // > 0: the weight is drawn from N(0, init_std²) and the bias starts at 0 (torchvision's VGG
  // classifier, std 0.01); 0: PyTorch's nn.Linear default, U(±1/sqrt(in)) for both.
  float init_std = 0.f;
  void check(const std::string& where) const;
};

struct DropoutAttrs {
  static constexpr const char* kName = "DropoutAttrs";
  float p = 0.f;  // the probability of zeroing an element, in [0, 1)
  void check(const std::string& where) const;
};

// An elementwise activation other than ReLU. What alpha may be depends on the function; the
// activation family's list says it (src/ops/activation/activation_list.def) and its layer checks it.
struct ActivationAttrs {
  static constexpr const char* kName = "ActivationAttrs";
  Activation activation = Activation::SiLU;
  float alpha = 0.f;  // LeakyReLU's negative slope, ELU's alpha
  void check(const std::string& where) const;
};

// A residual block of a blueprint (expanded into its body, shortcut and add).
struct ResidualAttrs {
  static constexpr const char* kName = "ResidualAttrs";
  bool relu_after = true;  // apply ReLU after the add
};

}  // namespace kiln

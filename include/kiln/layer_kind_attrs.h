#pragma once
// The attributes of the model language's layer kinds, one struct per kind, as the model author
// writes them (the DSL's Blueprint::conv(ConvAttrs, name), ...). A layer holds its kind's struct
// in a kiln::LayerAttrs (kiln/layer_attrs.h); a kind without attributes (ReLU, Flatten, Add, Mul,
// Concat, GlobalAvgPool) holds none. Each check(where) refuses values that can never work, naming `where`
// ("conv 'stem'") and the fix; compile's expansion calls it once for every layer as it enters the
// graph. What a kernel does not support yet (a rectangular kernel, ...) is refused where the
// layer is lowered, not here: these describe the model, not the engine. Part of the IR.
#include <cstdint>
#include <string>
#include <tuple>

#include "kiln/activation_kinds.h"

namespace kiln {

// How a weight (a convolution's filters, a linear layer's matrix) starts, torch.nn.init's draws as
// torchvision's families call them: a normal, truncated normal or uniform draw whose standard
// deviation (or bound) is `gain / sqrt(fan)`, or `gain` itself with Fan::None.
struct WeightInit {
  enum class Draw : uint8_t { Normal, TruncatedNormal, Uniform };
  enum class Fan : uint8_t { None, In, Out };
  Draw draw = Draw::Normal;
  Fan fan = Fan::Out;
  double gain = 1.4142135623730951;  // sqrt(2)

  // kaiming_normal_(w, mode="fan_out", nonlinearity="relu"): ResNet, VGG, MobileNet, EfficientNet,
  // RegNet, MNASNet's convolutions.
  static WeightInit kaiming_normal_fan_out() { return {Draw::Normal, Fan::Out, 1.4142135623730951}; }
  // kaiming_normal_(w) (fan_in, ReLU's gain): DenseNet.
  static WeightInit kaiming_normal_fan_in() { return {Draw::Normal, Fan::In, 1.4142135623730951}; }
  // kaiming_uniform_(w) (fan_in, ReLU's gain, bound sqrt(6 / fan_in)): SqueezeNet.
  static WeightInit kaiming_uniform_fan_in() { return {Draw::Uniform, Fan::In, 2.449489742783178}; }
  // nn.Conv2d's and nn.Linear's reset_parameters, U(±1 / sqrt(fan_in)): AlexNet, ShuffleNetV2.
  static WeightInit torch_default() { return {Draw::Uniform, Fan::In, 1.0}; }
  static WeightInit normal(double std) { return {Draw::Normal, Fan::None, std}; }
  // nn.init.trunc_normal_(w, std=std): N(0, std²) redrawn outside ±2 (torch's default a and b).
  static WeightInit trunc_normal(double std) { return {Draw::TruncatedNormal, Fan::None, std}; }
  static WeightInit uniform(double bound) { return {Draw::Uniform, Fan::None, bound}; }
  // `draw` with std or bound gain / sqrt(fan) (fan_out or fan_in as `fan` says).
  static WeightInit scaled(Draw draw, Fan fan, double gain) { return {draw, fan, gain}; }

  // (Written out: CUDA sources that include this header compile as C++17.)
  bool operator==(const WeightInit& o) const { return draw == o.draw && fan == o.fan && gain == o.gain; }
  void check(const std::string& where) const;
};

// How a bias starts: zero (torchvision's families) or nn.Conv2d's and nn.Linear's default,
// U(±1 / sqrt(fan_in)) (AlexNet, ShuffleNetV2, a plain nn.Linear head).
enum class BiasInit : uint8_t { Zeros, TorchDefault };

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
  WeightInit init = WeightInit::kaiming_normal_fan_out();
  BiasInit bias_init = BiasInit::Zeros;

  // A square kernel, one stride and the same padding on every side (what the DSL's conv() takes).
  static ConvAttrs square(int out_channels, int kernel, int stride = 1, int padding = 0, bool bias = false);
  void check(const std::string& where) const;
};

// BatchNorm (PyTorch's BatchNorm2d / BatchNorm1d).
struct BatchNormAttrs {
  static constexpr const char* kName = "BatchNormAttrs";
  // double, as PyTorch's Python floats: a float64 program normalizes with eps = 0.001, not float(0.001).
  double eps = 1e-5;
  double momentum = 0.1;  // weight of the new batch in the running statistics
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
  // PyTorch's ceil_mode: the output size rounds up, so a last window may hang over the bottom or
  // right edge (it must start inside the input or its top/left padding, PyTorch's rule).
  bool ceil_mode = false;
  // Average pooling: padding counts in the divisor (PyTorch's default, true) or not. A window
  // hanging over the edge in ceil mode never counts what lies beyond the padding.
  bool count_include_pad = true;

  static PoolAttrs square(int kernel, int stride, int padding = 0);
  void check(const std::string& where) const;
};

// A fully connected layer (fc, PyTorch's nn.Linear).
struct LinearAttrs {
  static constexpr const char* kName = "LinearAttrs";
  int out_features = 0;
  bool bias = true;
  // nn.Linear's default for both, or torchvision's (VGG's classifier: normal(0.01) and a zero bias).
  WeightInit init = WeightInit::torch_default();
  BiasInit bias_init = BiasInit::TorchDefault;
  void check(const std::string& where) const;
};

// PyTorch's AdaptiveAvgPool2d((out_h, out_w)): output cell (i, j) averages input rows
// [floor(i H / out_h), ceil((i + 1) H / out_h)) and the columns alike.
struct AdaptiveAvgPoolAttrs {
  static constexpr const char* kName = "AdaptiveAvgPoolAttrs";
  int out_h = 1, out_w = 1;
  void check(const std::string& where) const;
};

// torchvision's StochasticDepth(p, mode="row").
struct StochasticDepthAttrs {
  static constexpr const char* kName = "StochasticDepthAttrs";
  double p = 0;  // the probability of dropping a sample's input, in [0, 1)
  void check(const std::string& where) const;
};

// PyTorch's nn.LayerNorm(C, eps) with its learned weight and bias (elementwise_affine, torchvision's
// only form), over the channels of each position: torchvision's LayerNorm2d and ConvNeXt's
// nn.LayerNorm after its permute to channels-last are both this layer on kiln's NHWC maps.
struct LayerNormAttrs {
  static constexpr const char* kName = "LayerNormAttrs";
  double eps = 1e-5;
  void check(const std::string& where) const;
};

// PyTorch's nn.GroupNorm(groups, C, eps) with its learned per-channel weight and bias: each
// sample's channels split into `groups` runs, each normalized over its channels, height and width.
struct GroupNormAttrs {
  static constexpr const char* kName = "GroupNormAttrs";
  int groups = 1;  // must divide the channels (checked against the input where the layer is lowered)
  double eps = 1e-5;
  void check(const std::string& where) const;
};

// A learned per-channel multiply, y = gamma * x, gamma starting at `init_value` (torchvision's
// ConvNeXt: nn.Parameter(torch.ones(C, 1, 1) * 1e-6)). Its parameter is `<layer>.layer_scale`,
// shaped (C, 1, 1) as torchvision's, so a layer named as the block ("features.1.0") carries
// PyTorch's name.
struct LayerScaleAttrs {
  static constexpr const char* kName = "LayerScaleAttrs";
  float init_value = 1e-6f;
  void check(const std::string& where) const;
};

// torchvision's channel_shuffle(x, groups): the channels viewed as groups x (C / groups), transposed.
struct ChannelShuffleAttrs {
  static constexpr const char* kName = "ChannelShuffleAttrs";
  int groups = 2;  // must divide the channels (checked against the input where the layer is lowered)
  void check(const std::string& where) const;
};

// Channels [start, start + count) of the input, PyTorch's x.narrow(1, start, count) (x.chunk(2,
// dim=1)'s halves are two of them).
struct ChannelSliceAttrs {
  static constexpr const char* kName = "ChannelSliceAttrs";
  int start = 0;
  int count = 0;
  void check(const std::string& where) const;
};

struct DropoutAttrs {
  static constexpr const char* kName = "DropoutAttrs";
  double p = 0;  // the probability of zeroing an element, in [0, 1) (double: PyTorch's 1 / (1 - p))
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

// A Conv -> BatchNorm -> activation layer (conv_bn_act), which the compiler's fusion makes (never
// written in a blueprint): the Conv's and the BatchNorm's attributes, which attrs_of finds as in a
// CBR layer, and its activation: ReLU, or `act` when `relu` is false.
struct ConvBnActAttrs {
  static constexpr const char* kName = "ConvBnActAttrs";
  ConvAttrs conv;  // bias false: BatchNorm's mean subtraction would cancel it
  BatchNormAttrs bn;
  bool relu = true;
  ActivationAttrs act;
  auto parts() const { return std::tie(conv, bn); }
};

// A residual block of a blueprint (expanded into its body, shortcut and add).
struct ResidualAttrs {
  static constexpr const char* kName = "ResidualAttrs";
  bool relu_after = true;  // apply ReLU after the add
};

}  // namespace kiln

#pragma once
// The building blocks several of torchvision's families share (torchvision.ops.misc's
// Conv2dNormActivation and SqueezeExcitation, models._utils' _make_divisible), written once for
// the zoo's generators, under the module names torchvision gives their parts.
#include <string>

#include "kiln/blueprint.h"

namespace kiln::zoo_blocks {

// The activations torchvision's blocks take as activation_layer (None: no activation).
enum class Act { None, ReLU, ReLU6, Hardswish, SiLU, Sigmoid, Hardsigmoid };

// Appends `act` under `name` (nothing for Act::None).
void activation(Blueprint& m, Act act, const std::string& name);

// _make_divisible(v, divisor, min_value=None): v rounded to the nearest multiple of divisor, at
// least divisor, and one divisor more where rounding lost over 10% of v.
int make_divisible(double v, int divisor);

// Conv2dNormActivation: a bias-free convolution padded to keep the size ((kernel - 1) / 2 x
// dilation), BatchNorm with `bn`'s eps and momentum, and the activation, as "<name>.0", ".1" and
// ".2".
void conv_norm_activation(Blueprint& m, const std::string& name, int out_channels, int kernel, int stride,
                          int groups, Act act, const BatchNormAttrs& bn = {}, int dilation = 1);

// SqueezeExcitation(channels, squeeze_channels, activation, scale_activation) at `name`: the
// block's input times a per-channel gate computed from it: adaptive average pool to 1x1 ("<name>.avgpool"),
// fc1 (1x1 convolution with bias to squeeze_channels), activation, fc2 (back to channels),
// scale_activation, then scale * input ("<name>", a Mul layer). The convolutions start as the
// family initializes them (MobileNetV3 and EfficientNet: Kaiming fan-out, zero biases; RegNet
// leaves the biases at nn.Conv2d's default).
void squeeze_excitation(Blueprint& m, const std::string& name, int channels, int squeeze_channels, Act activation,
                        Act scale_activation, WeightInit init = WeightInit::kaiming_normal_fan_out(),
                        BiasInit bias_init = BiasInit::Zeros);

}  // namespace kiln::zoo_blocks

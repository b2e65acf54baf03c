// torchvision's MobileNetV3 (torchvision.models.mobilenetv3): inverted residual blocks with
// depthwise convolutions of 3x3 or 5x5, ReLU or hard-swish, squeeze-and-excitation gated by a hard
// sigmoid in some, and a hard-swish classifier head.
#include <fmt/format.h>

#include <vector>

#include "model/zoo/zoo_blocks.h"
#include "model/zoo_family.h"

namespace kiln {
namespace {

using zoo_blocks::Act;

// torchvision's BatchNorm for MobileNetV3: eps 0.001, momentum 0.01.
const BatchNormAttrs kNorm{.eps = 0.001, .momentum = 0.01};

// One row of torchvision's bneck_conf: input, kernel, expanded and output channels, SE, activation
// (ReLU or hard-swish), stride (dilation is 1 for the classifiers).
struct Bneck {
  int in, kernel, expanded, out;
  bool se;
  Act act;
  int stride;
};

// The InvertedResidual block at features.<index>: its layers are the module's `block` Sequential;
// the input is added back when the block keeps the size and the channels.
void inverted_residual(Blueprint& m, int index, const Bneck& b) {
  Blueprint body("block");
  int layer = 0;
  if (b.expanded != b.in)
    zoo_blocks::conv_norm_activation(body, fmt::format("block.{}", layer++), b.expanded, 1, 1, 1, b.act, kNorm);
  zoo_blocks::conv_norm_activation(body, fmt::format("block.{}", layer++), b.expanded, b.kernel, b.stride,
                                   b.expanded, b.act, kNorm);
  if (b.se) {
    const int squeeze = zoo_blocks::make_divisible(b.expanded / 4, 8);
    zoo_blocks::squeeze_excitation(body, fmt::format("block.{}", layer++), b.expanded, squeeze, Act::ReLU,
                                   Act::Hardsigmoid);
  }
  zoo_blocks::conv_norm_activation(body, fmt::format("block.{}", layer), b.out, 1, 1, 1, Act::None, kNorm);
  const std::string name = fmt::format("features.{}", index);
  if (b.stride == 1 && b.in == b.out) {
    m.residual(body, std::nullopt, /*relu_after=*/false, name);
  } else {
    m.seq(body, name);
  }
}

Blueprint mobilenet_v3(const char* name, const std::vector<Bneck>& blocks, int last_channel, int num_classes) {
  Blueprint m(name);
  m.input(224, 224, 3);
  zoo_blocks::conv_norm_activation(m, "features.0", blocks.front().in, 3, 2, 1, Act::Hardswish, kNorm);
  int index = 1;
  for (const Bneck& b : blocks) inverted_residual(m, index++, b);
  const int last_conv = 6 * blocks.back().out;
  zoo_blocks::conv_norm_activation(m, fmt::format("features.{}", index), last_conv, 1, 1, 1, Act::Hardswish, kNorm);
  m.global_avgpool("avgpool");
  // torchvision initializes both linear layers from N(0, 0.01²) with zero biases.
  m.fc(last_channel, true, "classifier.0", 0.01f).hardswish("classifier.1");
  m.dropout(0.2, "classifier.2").fc(num_classes, true, "classifier.3", 0.01f);
  return m;
}

constexpr Act RE = Act::ReLU, HS = Act::Hardswish;

Blueprint mobilenet_v3_large(int num_classes) {
  return mobilenet_v3("mobilenet_v3_large",
                      {{16, 3, 16, 16, false, RE, 1},
                       {16, 3, 64, 24, false, RE, 2},
                       {24, 3, 72, 24, false, RE, 1},
                       {24, 5, 72, 40, true, RE, 2},
                       {40, 5, 120, 40, true, RE, 1},
                       {40, 5, 120, 40, true, RE, 1},
                       {40, 3, 240, 80, false, HS, 2},
                       {80, 3, 200, 80, false, HS, 1},
                       {80, 3, 184, 80, false, HS, 1},
                       {80, 3, 184, 80, false, HS, 1},
                       {80, 3, 480, 112, true, HS, 1},
                       {112, 3, 672, 112, true, HS, 1},
                       {112, 5, 672, 160, true, HS, 2},
                       {160, 5, 960, 160, true, HS, 1},
                       {160, 5, 960, 160, true, HS, 1}},
                      1280, num_classes);
}

Blueprint mobilenet_v3_small(int num_classes) {
  return mobilenet_v3("mobilenet_v3_small",
                      {{16, 3, 16, 16, true, RE, 2},
                       {16, 3, 72, 24, false, RE, 2},
                       {24, 3, 88, 24, false, RE, 1},
                       {24, 5, 96, 40, true, HS, 2},
                       {40, 5, 240, 40, true, HS, 1},
                       {40, 5, 240, 40, true, HS, 1},
                       {40, 5, 120, 48, true, HS, 1},
                       {48, 5, 144, 48, true, HS, 1},
                       {48, 5, 288, 96, true, HS, 2},
                       {96, 5, 576, 96, true, HS, 1},
                       {96, 5, 576, 96, true, HS, 1}},
                      1024, num_classes);
}

}  // namespace

extern const ZooFamily kMobilenetV3Models{
    "mobilenet_v3",
    {{"mobilenet_v3_large", mobilenet_v3_large, 1000}, {"mobilenet_v3_small", mobilenet_v3_small, 1000}}};

}  // namespace kiln

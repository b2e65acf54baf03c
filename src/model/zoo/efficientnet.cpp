// torchvision's EfficientNet B0-B4 and V2-S/M (torchvision.models.efficientnet): MBConv blocks
// (1x1 expansion, depthwise 3x3 or 5x5, squeeze-and-excitation gated by a sigmoid, linear 1x1
// projection) with SiLU, stochastic depth on the residual branches growing linearly along the
// network. B1-B4 scale B0's stages' widths and depths by each model's factors; V2 begins with
// FusedMBConv stages (one full convolution in place of expansion + depthwise, no SE) and uses
// BatchNorm with eps 1e-3.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "model/zoo/zoo_blocks.h"
#include "model/zoo_family.h"

namespace kiln {
namespace {

using zoo_blocks::Act;

// One row of torchvision's inverted_residual_setting: block kind, expansion ratio, kernel, first
// stride, input and output channels, blocks.
enum class Block { MBConv, FusedMBConv };
struct Stage {
  int expand_ratio, kernel, stride, in, out, layers;
  Block block = Block::MBConv;
};

const Stage kB0Stages[] = {{1, 3, 1, 32, 16, 1},  {6, 3, 2, 16, 24, 2},  {6, 5, 2, 24, 40, 2},
                           {6, 3, 2, 40, 80, 3},  {6, 5, 1, 80, 112, 3}, {6, 5, 2, 112, 192, 4},
                           {6, 3, 1, 192, 320, 1}};

// V2's stages (width and depth 1, so the channels are the table's).
const Stage kV2SStages[] = {{1, 3, 1, 24, 24, 2, Block::FusedMBConv}, {4, 3, 2, 24, 48, 4, Block::FusedMBConv},
                            {4, 3, 2, 48, 64, 4, Block::FusedMBConv}, {4, 3, 2, 64, 128, 6},
                            {6, 3, 1, 128, 160, 9},                   {6, 3, 2, 160, 256, 15}};
const Stage kV2MStages[] = {{1, 3, 1, 24, 24, 3, Block::FusedMBConv}, {4, 3, 2, 24, 48, 5, Block::FusedMBConv},
                            {4, 3, 2, 48, 80, 5, Block::FusedMBConv}, {4, 3, 2, 80, 160, 7},
                            {6, 3, 1, 160, 176, 14},                  {6, 3, 2, 176, 304, 18},
                            {6, 3, 1, 304, 512, 5}};
// The MBConv or FusedMBConv block at `name` ("features.<stage>.<block>"): its layers are the
// module's `block` Sequential; the residual branch passes stochastic depth before the input is
// added back.
void mbconv(Blueprint& m, const std::string& name, const Stage& s, int stride, int in, int out, double sd_prob,
            const BatchNormAttrs& bn) {
  const int expanded = zoo_blocks::make_divisible(double(in) * s.expand_ratio, 8);
  Blueprint body("block");
  int layer = 0;
  const auto conv = [&](int channels, int kernel, int conv_stride, int groups, Act act) {
    zoo_blocks::conv_norm_activation(body, fmt::format("block.{}", layer++), channels, kernel, conv_stride, groups,
                                     act, bn);
  };
  if (s.block == Block::FusedMBConv) {
    // One full convolution expands (or, without expansion, is the whole block).
    conv(expanded != in ? expanded : out, s.kernel, stride, 1, Act::SiLU);
    if (expanded != in) conv(out, 1, 1, 1, Act::None);
  } else {
    if (expanded != in) conv(expanded, 1, 1, 1, Act::SiLU);
    conv(expanded, s.kernel, stride, expanded, Act::SiLU);
    zoo_blocks::squeeze_excitation(body, fmt::format("block.{}", layer++), expanded, std::max(1, in / 4), Act::SiLU,
                                   Act::Sigmoid);
    conv(out, 1, 1, 1, Act::None);
  }
  if (stride == 1 && in == out) {
    body.stochastic_depth(sd_prob, "stochastic_depth");
    m.residual(body, std::nullopt, /*relu_after=*/false, name);
  } else {
    m.seq(body, name);
  }
}

// torchvision's _efficientnet_conf and EfficientNet: `stages` scaled by width_mult and depth_mult;
// `last_channel`, the last 1x1 convolution's (0: four times the last stage's, B0-B4's); `side`: the
// input its weights were trained at (their transforms' crop), where torchvision counts its
// multiply-adds.
template <size_t kStages>
Blueprint efficientnet(const char* name, const Stage (&stages)[kStages], double width_mult, double depth_mult,
                       int last_channel, const BatchNormAttrs& bn, double dropout, int side, int num_classes) {
  const auto channels = [&](int c) { return zoo_blocks::make_divisible(c * width_mult, 8); };
  const auto depth = [&](int layers) { return int(std::ceil(layers * depth_mult)); };
  Blueprint m(name);
  m.input(side, side, 3);
  zoo_blocks::conv_norm_activation(m, "features.0", channels(stages[0].in), 3, 2, 1, Act::SiLU, bn);
  int total_blocks = 0;
  for (const Stage& s : stages) total_blocks += depth(s.layers);
  int block_id = 0, stage_index = 1;
  for (const Stage& s : stages) {
    const int in = channels(s.in), out = channels(s.out);
    for (int i = 0; i < depth(s.layers); ++i, ++block_id) {
      // torchvision's stochastic depth probability: 0.2 x (blocks before this one) / (all blocks).
      const double sd_prob = 0.2 * double(block_id) / double(total_blocks);
      mbconv(m, fmt::format("features.{}.{}", stage_index, i), s, i == 0 ? s.stride : 1, i == 0 ? in : out, out,
             sd_prob, bn);
    }
    ++stage_index;
  }
  const int last_in = channels(stages[kStages - 1].out);
  zoo_blocks::conv_norm_activation(m, fmt::format("features.{}", stage_index),
                                   last_channel > 0 ? last_channel : 4 * last_in, 1, 1, 1, Act::SiLU, bn);
  m.global_avgpool("avgpool").dropout(dropout, "classifier.0");
  // torchvision's classifier: U(±1 / sqrt(out_features)), zero bias.
  m.fc(LinearAttrs{.out_features = num_classes,
                   .init = WeightInit::scaled(WeightInit::Draw::Uniform, WeightInit::Fan::Out, 1.0),
                   .bias_init = BiasInit::Zeros},
       "classifier.1");
  return m;
}

Blueprint b(const char* name, double width, double depth, double dropout, int side, int num_classes) {
  return efficientnet(name, kB0Stages, width, depth, 0, BatchNormAttrs{}, dropout, side, num_classes);
}
Blueprint efficientnet_b0(int num_classes) { return b("efficientnet_b0", 1.0, 1.0, 0.2, 224, num_classes); }
Blueprint efficientnet_b1(int num_classes) { return b("efficientnet_b1", 1.0, 1.1, 0.2, 240, num_classes); }
Blueprint efficientnet_b2(int num_classes) { return b("efficientnet_b2", 1.1, 1.2, 0.3, 288, num_classes); }
Blueprint efficientnet_b3(int num_classes) { return b("efficientnet_b3", 1.2, 1.4, 0.3, 300, num_classes); }
Blueprint efficientnet_b4(int num_classes) { return b("efficientnet_b4", 1.4, 1.8, 0.4, 380, num_classes); }

// V2: BatchNorm with eps 1e-3 (torchvision's partial(nn.BatchNorm2d, eps=1e-03)), a 1280-channel last
// convolution; S at its weights' 384 crop, M at 480. (V2-L is left out: with random weights its fp32
// logits at 480x480 are chaotic, 6e-3 of their scale from its own float64 program's, so the export
// test cannot tell a wrong file from a right one there.)
constexpr BatchNormAttrs kV2Norm{.eps = 1e-3};
Blueprint efficientnet_v2_s(int num_classes) {
  return efficientnet("efficientnet_v2_s", kV2SStages, 1.0, 1.0, 1280, kV2Norm, 0.2, 384, num_classes);
}
Blueprint efficientnet_v2_m(int num_classes) {
  return efficientnet("efficientnet_v2_m", kV2MStages, 1.0, 1.0, 1280, kV2Norm, 0.3, 480, num_classes);
}

}  // namespace

extern const ZooFamily kEfficientnetModels{"efficientnet",
                                           {{"efficientnet_b0", efficientnet_b0, 1000},
                                            {"efficientnet_b1", efficientnet_b1, 1000},
                                            {"efficientnet_b2", efficientnet_b2, 1000},
                                            {"efficientnet_b3", efficientnet_b3, 1000},
                                            {"efficientnet_b4", efficientnet_b4, 1000},
                                            {"efficientnet_v2_s", efficientnet_v2_s, 1000},
                                            {"efficientnet_v2_m", efficientnet_v2_m, 1000}}};

}  // namespace kiln

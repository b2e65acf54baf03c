// torchvision's EfficientNet B0-B4 (torchvision.models.efficientnet): MBConv blocks (1x1
// expansion, depthwise 3x3 or 5x5, squeeze-and-excitation gated by a sigmoid, linear 1x1
// projection) with SiLU, stochastic depth on the residual branches growing linearly along the
// network, the stages' widths and depths scaled from B0's by each model's width and depth factors.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "model/zoo/zoo_blocks.h"
#include "model/zoo_family.h"

namespace kiln {
namespace {

using zoo_blocks::Act;

// One row of torchvision's MBConvConfig list for B0: expansion ratio, kernel, first stride, input
// and output channels, blocks.
struct Stage {
  int expand_ratio, kernel, stride, in, out, layers;
};

const Stage kB0Stages[] = {{1, 3, 1, 32, 16, 1},  {6, 3, 2, 16, 24, 2},  {6, 5, 2, 24, 40, 2},
                           {6, 3, 2, 40, 80, 3},  {6, 5, 1, 80, 112, 3}, {6, 5, 2, 112, 192, 4},
                           {6, 3, 1, 192, 320, 1}};

// The MBConv block at `name` ("features.<stage>.<block>"): its layers are the module's `block`
// Sequential; the residual branch passes stochastic depth before the input is added back.
void mbconv(Blueprint& m, const std::string& name, int expand_ratio, int kernel, int stride, int in, int out,
            float sd_prob) {
  const int expanded = zoo_blocks::make_divisible(double(in) * expand_ratio, 8);
  Blueprint body("block");
  int layer = 0;
  if (expanded != in)
    zoo_blocks::conv_norm_activation(body, fmt::format("block.{}", layer++), expanded, 1, 1, 1, Act::SiLU);
  zoo_blocks::conv_norm_activation(body, fmt::format("block.{}", layer++), expanded, kernel, stride, expanded,
                                   Act::SiLU);
  zoo_blocks::squeeze_excitation(body, fmt::format("block.{}", layer++), expanded, std::max(1, in / 4), Act::SiLU,
                                 Act::Sigmoid);
  zoo_blocks::conv_norm_activation(body, fmt::format("block.{}", layer), out, 1, 1, 1, Act::None);
  if (stride == 1 && in == out) {
    body.stochastic_depth(sd_prob, "stochastic_depth");
    m.residual(body, std::nullopt, /*relu_after=*/false, name);
  } else {
    m.seq(body, name);
  }
}

// torchvision's _efficientnet_conf("efficientnet_bN", width_mult, depth_mult) and EfficientNet;
// `side`: the input its weights were trained at (their transforms' crop), where torchvision
// counts its multiply-adds.
Blueprint efficientnet(const char* name, double width_mult, double depth_mult, float dropout, int side,
                       int num_classes) {
  const auto channels = [&](int c) { return zoo_blocks::make_divisible(c * width_mult, 8); };
  const auto depth = [&](int layers) { return int(std::ceil(layers * depth_mult)); };
  Blueprint m(name);
  m.input(side, side, 3);
  zoo_blocks::conv_norm_activation(m, "features.0", channels(kB0Stages[0].in), 3, 2, 1, Act::SiLU);
  int total_blocks = 0;
  for (const Stage& s : kB0Stages) total_blocks += depth(s.layers);
  int block_id = 0, stage_index = 1;
  for (const Stage& s : kB0Stages) {
    const int in = channels(s.in), out = channels(s.out);
    for (int i = 0; i < depth(s.layers); ++i, ++block_id) {
      // torchvision's stochastic depth probability: 0.2 x (blocks before this one) / (all blocks).
      const float sd_prob = 0.2f * float(block_id) / float(total_blocks);
      mbconv(m, fmt::format("features.{}.{}", stage_index, i), s.expand_ratio, s.kernel, i == 0 ? s.stride : 1,
             i == 0 ? in : out, out, sd_prob);
    }
    ++stage_index;
  }
  const int last_in = channels(kB0Stages[6].out);
  zoo_blocks::conv_norm_activation(m, fmt::format("features.{}", stage_index), 4 * last_in, 1, 1, 1, Act::SiLU);
  m.global_avgpool("avgpool").dropout(dropout, "classifier.0");
  // torchvision's classifier: U(±1 / sqrt(out_features)), zero bias.
  m.fc(LinearAttrs{.out_features = num_classes,
                   .init = WeightInit::scaled(WeightInit::Draw::Uniform, WeightInit::Fan::Out, 1.0),
                   .bias_init = BiasInit::Zeros},
       "classifier.1");
  return m;
}

Blueprint efficientnet_b0(int num_classes) { return efficientnet("efficientnet_b0", 1.0, 1.0, 0.2f, 224, num_classes); }
Blueprint efficientnet_b1(int num_classes) { return efficientnet("efficientnet_b1", 1.0, 1.1, 0.2f, 240, num_classes); }
Blueprint efficientnet_b2(int num_classes) { return efficientnet("efficientnet_b2", 1.1, 1.2, 0.3f, 288, num_classes); }
Blueprint efficientnet_b3(int num_classes) { return efficientnet("efficientnet_b3", 1.2, 1.4, 0.3f, 300, num_classes); }
Blueprint efficientnet_b4(int num_classes) { return efficientnet("efficientnet_b4", 1.4, 1.8, 0.4f, 380, num_classes); }

}  // namespace

extern const ZooFamily kEfficientnetModels{"efficientnet",
                                           {{"efficientnet_b0", efficientnet_b0, 1000},
                                            {"efficientnet_b1", efficientnet_b1, 1000},
                                            {"efficientnet_b2", efficientnet_b2, 1000},
                                            {"efficientnet_b3", efficientnet_b3, 1000},
                                            {"efficientnet_b4", efficientnet_b4, 1000}}};

}  // namespace kiln

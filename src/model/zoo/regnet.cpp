// torchvision's RegNet family (torchvision.models.regnet): a 3x3 stem and four stages of residual
// bottleneck blocks whose widths, depths and group widths follow from five numbers (depth, w_0,
// w_a, w_m, group width) by the quantized linear rule of "Designing Network Design Spaces"
// (Radosavovic et al., 2020), computed here as torchvision's BlockParams.from_init_params does.
// RegNet X has no squeeze-and-excitation; RegNet Y is the same generator with an SE ratio.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "model/zoo/zoo_blocks.h"
#include "model/zoo_family.h"

namespace kiln {
namespace {

// The arguments of torchvision's BlockParams.from_init_params.
struct RegNetParams {
  int depth;        // blocks in all stages together
  int w_0;          // the first block's width
  double w_a;       // the widths' slope per block before quantization
  double w_m;       // the ratio between consecutive stages' widths
  int group_width;  // channels per group of the 3x3 convolution
  double bottleneck_multiplier = 1.0;
  double se_ratio = 0.0;  // RegNet Y: the SE block's squeeze width over the block's input width
};

// One stage's blocks: the first strides by 2, all have the stage's width.
struct Stage {
  int width;
  int depth;
  int group_width;
};

// The blocks' widths as torchvision computes them: in float32 (torch's default dtype) and rounded
// half to even (torch.round), so that a width on a rounding boundary lands where torchvision's does.
std::vector<int> block_widths(const RegNetParams& p) {
  constexpr float kQuant = 8.f;
  const float w_0 = float(p.w_0), w_a = float(p.w_a), w_m = float(p.w_m);
  const float log_w_m = float(std::log(p.w_m));
  std::vector<int> widths;
  for (int i = 0; i < p.depth; ++i) {
    const float linear = float(i) * w_a + w_0;
    const float capacity = std::nearbyint(std::log(linear / w_0) / log_w_m);
    widths.push_back(int(std::nearbyint(w_0 * std::pow(w_m, capacity) / kQuant) * kQuant));
  }
  return widths;
}

// Consecutive blocks of one width make a stage; then each stage's bottleneck width is made a
// multiple of its group width (torchvision's _adjust_widths_groups_compatibilty), the group width
// shrinking to the bottleneck width where that is narrower.
std::vector<Stage> stages(const std::string& model, const RegNetParams& p) {
  if (p.depth < 1 || p.w_a < 0 || p.w_0 <= 0 || p.w_m <= 1 || p.w_0 % 8 != 0 || p.group_width < 1 ||
      p.bottleneck_multiplier <= 0)
    fail("regnet '{}': depth {}, w_0 {}, w_a {}, w_m {}, group width {}, bottleneck multiplier {} make no RegNet; "
         "it needs depth >= 1, w_0 > 0 and a multiple of 8, w_a >= 0, w_m > 1, group width >= 1 and a positive "
         "bottleneck multiplier",
         model, p.depth, p.w_0, p.w_a, p.w_m, p.group_width, p.bottleneck_multiplier);
  std::vector<Stage> out;
  for (int w : block_widths(p)) {
    if (out.empty() || out.back().width != w) out.push_back({w, 0, p.group_width});
    ++out.back().depth;
  }
  for (Stage& s : out) {
    const int bottleneck = int(s.width * p.bottleneck_multiplier);
    s.group_width = std::min(s.group_width, bottleneck);
    s.width = int(zoo_blocks::make_divisible(bottleneck, s.group_width) / p.bottleneck_multiplier);
  }
  return out;
}

// torchvision's Conv2dNormActivation with ReLU or none (the stem, f.a, f.b, f.c).
void conv_bn(Blueprint& m, const std::string& name, int out_channels, int kernel, int stride, int groups, bool relu) {
  zoo_blocks::conv_norm_activation(m, name, out_channels, kernel, stride, groups,
                                   relu ? zoo_blocks::Act::ReLU : zoo_blocks::Act::None);
}

// torchvision's ResBottleneckBlock: f = BottleneckTransform (1x1; 3x3 grouped, with the stride;
// [SE]; 1x1 without ReLU), added to the input or to its projection (a strided 1x1 convolution and
// BatchNorm, where the width or the size changes), then ReLU.
void bottleneck_block(Blueprint& m, const std::string& name, int width_in, int width_out, int stride,
                      int group_width, const RegNetParams& p) {
  const int bottleneck = int(std::nearbyint(width_out * p.bottleneck_multiplier));
  Blueprint f("f");
  conv_bn(f, "f.a", bottleneck, 1, 1, 1, true);
  conv_bn(f, "f.b", bottleneck, 3, stride, bottleneck / group_width, true);
  if (p.se_ratio > 0) {
    // RegNet Y: SqueezeExcitation between b and c, squeezing to round(se_ratio x width_in)
    // channels with ReLU and a sigmoid gate. RegNet's init draws every convolution's weight from
    // N(0, 2 / fan_out) and leaves the biases at nn.Conv2d's default.
    zoo_blocks::squeeze_excitation(f, "f.se", bottleneck, int(std::nearbyint(p.se_ratio * width_in)),
                                   zoo_blocks::Act::ReLU, zoo_blocks::Act::Sigmoid,
                                   WeightInit::kaiming_normal_fan_out(), BiasInit::TorchDefault);
  }
  conv_bn(f, "f.c", width_out, 1, 1, 1, false);
  std::optional<Blueprint> proj;
  if (width_in != width_out || stride != 1) {
    proj = Blueprint("proj");  // its layers are named "<block>.proj.0" and ".1"
    proj->conv(ConvAttrs::square(width_out, 1, stride, 0), "0").bn("1");
  }
  m.residual(f, proj, /*relu_after=*/true, name);
}

Blueprint regnet(const std::string& name, const RegNetParams& p, int num_classes) {
  constexpr int kStemWidth = 32;
  Blueprint m(name);
  m.input(224, 224, 3);
  conv_bn(m, "stem", kStemWidth, 3, 2, 1, true);  // SimpleStemIN
  int width = kStemWidth;
  int index = 1;  // torchvision numbers the stages from 1: trunk_output.block1.block1-0
  for (const Stage& s : stages(name, p)) {
    for (int b = 0; b < s.depth; ++b) {
      bottleneck_block(m, fmt::format("trunk_output.block{}.block{}-{}", index, index, b), width, s.width,
                       b == 0 ? 2 : 1, s.group_width, p);
      width = s.width;
    }
    ++index;
  }
  // torchvision initializes the classifier from N(0, 0.01²) with a zero bias.
  m.global_avgpool("avgpool").fc(num_classes, true, "fc", 0.01f);
  return m;
}

// torchvision's settings (depth, w_0, w_a, w_m, group width).
constexpr RegNetParams kX400mf{22, 24, 24.48, 2.54, 16};
constexpr RegNetParams kX800mf{16, 56, 35.73, 2.28, 16};
constexpr RegNetParams kX1_6gf{18, 80, 34.01, 2.25, 24};
constexpr RegNetParams kX3_2gf{25, 88, 26.31, 2.25, 48};
constexpr RegNetParams kX8gf{23, 80, 49.56, 2.88, 120};
constexpr RegNetParams kX16gf{22, 216, 55.59, 2.1, 128};
constexpr RegNetParams kX32gf{23, 320, 69.86, 2.0, 168};
// RegNet Y: the same with squeeze-and-excitation to a quarter of each block's input width.
constexpr RegNetParams kY400mf{16, 48, 27.89, 2.09, 8, 1.0, 0.25};
constexpr RegNetParams kY800mf{14, 56, 38.84, 2.4, 16, 1.0, 0.25};
constexpr RegNetParams kY1_6gf{27, 48, 20.71, 2.65, 24, 1.0, 0.25};
constexpr RegNetParams kY3_2gf{21, 80, 42.63, 2.66, 24, 1.0, 0.25};
constexpr RegNetParams kY8gf{17, 192, 76.82, 2.19, 56, 1.0, 0.25};
constexpr RegNetParams kY16gf{18, 200, 106.23, 2.48, 112, 1.0, 0.25};
constexpr RegNetParams kY32gf{20, 232, 115.89, 2.53, 232, 1.0, 0.25};

}  // namespace

extern const ZooFamily kRegnetModels{
    "regnet",
    {
        {"regnet_x_400mf", [](int n) { return regnet("regnet_x_400mf", kX400mf, n); }, 1000},
        {"regnet_x_800mf", [](int n) { return regnet("regnet_x_800mf", kX800mf, n); }, 1000},
        {"regnet_x_1_6gf", [](int n) { return regnet("regnet_x_1_6gf", kX1_6gf, n); }, 1000},
        {"regnet_x_3_2gf", [](int n) { return regnet("regnet_x_3_2gf", kX3_2gf, n); }, 1000},
        {"regnet_x_8gf", [](int n) { return regnet("regnet_x_8gf", kX8gf, n); }, 1000},
        {"regnet_x_16gf", [](int n) { return regnet("regnet_x_16gf", kX16gf, n); }, 1000},
        {"regnet_x_32gf", [](int n) { return regnet("regnet_x_32gf", kX32gf, n); }, 1000},
        {"regnet_y_400mf", [](int n) { return regnet("regnet_y_400mf", kY400mf, n); }, 1000},
        {"regnet_y_800mf", [](int n) { return regnet("regnet_y_800mf", kY800mf, n); }, 1000},
        {"regnet_y_1_6gf", [](int n) { return regnet("regnet_y_1_6gf", kY1_6gf, n); }, 1000},
        {"regnet_y_3_2gf", [](int n) { return regnet("regnet_y_3_2gf", kY3_2gf, n); }, 1000},
        {"regnet_y_8gf", [](int n) { return regnet("regnet_y_8gf", kY8gf, n); }, 1000},
        {"regnet_y_16gf", [](int n) { return regnet("regnet_y_16gf", kY16gf, n); }, 1000},
        {"regnet_y_32gf", [](int n) { return regnet("regnet_y_32gf", kY32gf, n); }, 1000},
    }};

}  // namespace kiln

// torchvision's ConvNeXt (torchvision.models.convnext): a 4x4 stride-4 patchify stem, four stages of
// CNBlocks (a 7x7 depthwise convolution, LayerNorm over the channels, a pointwise MLP with GELU
// as two nn.Linear over the channels-last map, a learned per-channel layer scale and stochastic
// depth, added back to the block's input), LayerNorm + 2x2 stride-2 convolutions between the
// stages, and a LayerNorm before the head. kiln's maps are channels-last already, so torchvision's
// Permute modules are no layers here.
#include <fmt/format.h>

#include <vector>

#include "model/zoo_family.h"

namespace kiln {
namespace {

constexpr double kNormEps = 1e-6;  // partial(LayerNorm2d / nn.LayerNorm, eps=1e-6)
constexpr float kLayerScale = 1e-6f;

// torchvision's init: trunc_normal_(std=0.02) for every Conv2d and Linear weight, zero biases.
ConvAttrs conv(int out_channels, int kernel, int stride, int padding, int groups) {
  ConvAttrs c = ConvAttrs::square(out_channels, kernel, stride, padding, /*bias=*/true);
  c.groups = groups;
  c.init = WeightInit::trunc_normal(0.02);
  return c;
}
LinearAttrs linear(int out_features) {
  return LinearAttrs{.out_features = out_features, .init = WeightInit::trunc_normal(0.02), .bias_init = BiasInit::Zeros};
}

// CNBlock at `name` ("features.1.0"): result = layer_scale * block(input), stochastic depth, + input.
// The layer scale is the layer named as the block, so its parameter is torchvision's
// "<name>.layer_scale"; the block's Sequential indices are torchvision's (1 and 6 are its Permutes).
void cn_block(Blueprint& m, const std::string& name, int dim, double sd_prob) {
  const Blueprint::Ref input = m.last();
  m.conv(conv(dim, 7, 1, 3, dim), name + ".block.0").layer_norm(kNormEps, name + ".block.2");
  m.fc(linear(4 * dim), name + ".block.3").gelu(false, name + ".block.4").fc(linear(dim), name + ".block.5");
  m.layer_scale(kLayerScale, name).stochastic_depth(sd_prob, name + ".stochastic_depth");
  m.add(m.last(), input, name + ".add");
}

struct Stage {
  int channels, blocks;
};

// torchvision's ConvNeXt(block_setting, stochastic_depth_prob): the stages' widths and depths; a
// stage's CNBlockConfig out_channels is the next stage's width (none after the last).
Blueprint convnext(const char* name, const std::vector<Stage>& stages, double stochastic_depth_prob,
                   int num_classes) {
  Blueprint m(name);
  m.input(224, 224, 3);
  // Conv2dNormActivation(3, C, 4, stride 4, padding 0, norm_layer=LayerNorm2d, no activation, bias).
  m.conv(conv(stages[0].channels, 4, 4, 0, 1), "features.0.0").layer_norm(kNormEps, "features.0.1");
  int total_blocks = 0;
  for (const Stage& s : stages) total_blocks += s.blocks;
  int block_id = 0, feature = 1;
  for (size_t i = 0; i < stages.size(); ++i) {
    for (int b = 0; b < stages[i].blocks; ++b, ++block_id) {
      // torchvision: stochastic_depth_prob x (blocks before this one) / (all blocks - 1).
      const double sd_prob = stochastic_depth_prob * double(block_id) / (double(total_blocks) - 1.0);
      cn_block(m, fmt::format("features.{}.{}", feature, b), stages[i].channels, sd_prob);
    }
    ++feature;
    if (i + 1 < stages.size()) {
      m.layer_norm(kNormEps, fmt::format("features.{}.0", feature));
      m.conv(conv(stages[i + 1].channels, 2, 2, 0, 1), fmt::format("features.{}.1", feature));
      ++feature;
    }
  }
  // avgpool (AdaptiveAvgPool2d(1)), then classifier: LayerNorm2d on the 1x1 map, Flatten, Linear.
  m.adaptive_avgpool(1, 1, "avgpool").layer_norm(kNormEps, "classifier.0").flatten("classifier.1");
  m.fc(linear(num_classes), "classifier.2");
  return m;
}

Blueprint convnext_tiny(int num_classes) {
  return convnext("convnext_tiny", {{96, 3}, {192, 3}, {384, 9}, {768, 3}}, 0.1, num_classes);
}
Blueprint convnext_small(int num_classes) {
  return convnext("convnext_small", {{96, 3}, {192, 3}, {384, 27}, {768, 3}}, 0.4, num_classes);
}
Blueprint convnext_base(int num_classes) {
  return convnext("convnext_base", {{128, 3}, {256, 3}, {512, 27}, {1024, 3}}, 0.5, num_classes);
}
Blueprint convnext_large(int num_classes) {
  return convnext("convnext_large", {{192, 3}, {384, 3}, {768, 27}, {1536, 3}}, 0.5, num_classes);
}

}  // namespace

extern const ZooFamily kConvnextModels{"convnext",
                                       {{"convnext_tiny", convnext_tiny, 1000},
                                        {"convnext_small", convnext_small, 1000},
                                        {"convnext_base", convnext_base, 1000},
                                        {"convnext_large", convnext_large, 1000}}};

}  // namespace kiln

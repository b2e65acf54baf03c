// The catalogue's last layer kinds train on the real digits on the CPU: a ConvNeXt block (7x7
// depthwise convolution with a bias, LayerNorm over the channels, a pointwise MLP of two linear
// layers over the channels-last map with GELU, layer scale, stochastic depth, added back), a
// LayerNorm + strided convolution downsampling, a ShuffleNetV2 unit (the channels split in two
// halves, one through a branch, concatenated and shuffled) and GroupNorm before the head. Six
// epochs, far past chance.
#include <gtest/gtest.h>

#include "digits_training.h"

namespace kiln {
namespace {

ConvAttrs conv(int channels, int kernel, int stride, int padding, int groups, bool bias) {
  ConvAttrs a = ConvAttrs::square(channels, kernel, stride, padding, bias);
  a.groups = groups;
  return a;
}

TEST(TrainDigits, LayerNormLayerScaleChannelShuffleAndGroupNormTrainASmallCnn) {
  Blueprint m("small_convnext");
  m.input(20, 20, 1).conv(conv(16, 3, 2, 1, 1, true), "stem").layer_norm(1e-6f, "stem_norm");  // 10x10
  const Blueprint::Ref x = m.last();
  m.conv(conv(16, 7, 1, 3, 16, true), "block.dw").layer_norm(1e-6f, "block.norm");
  m.fc(64, true, "block.pw1").gelu(false, "block.act").fc(16, true, "block.pw2");
  // torchvision's 1e-6 keeps a deep network's branches quiet at first; one block in six epochs
  // learns faster from 1 (measured: 0.1 gave 0.897, 1 gave 0.903 with the 3x3 stem).
  m.layer_scale(1.0f, "block").stochastic_depth(0.1f, "block.drop_path");
  m.add(m.last(), x, "block.add");
  m.layer_norm(1e-6f, "down.norm").conv(conv(32, 2, 2, 0, 1, true), "down.conv");  // 5x5
  // ShuffleNetV2's stride-1 unit: x.chunk(2, 1), branch2 on the second half, cat, shuffle.
  const Blueprint::Ref y = m.last();
  m.channel_slice(0, 16, "unit.x1");
  const Blueprint::Ref x1 = m.last();
  m.from(y).channel_slice(16, 16, "unit.x2").cbr(16, 1, 1, 0, "unit.pw1");
  m.conv(conv(16, 3, 1, 1, 16, false), "unit.dw").bn("unit.dw_bn").cbr(16, 1, 1, 0, "unit.pw2");
  m.concat({x1, m.last()}, "unit.cat").channel_shuffle(2, "unit.shuffle");
  m.group_norm(4, 1e-5f, "head_norm").relu("head_act").global_avgpool("pool").fc(10, true, "fc");
  const testing::DigitsRun run = testing::train_on_digits(m, 6, "small_convnext");
  EXPECT_LT(run.last_loss, run.first_loss);
  // Chance is 0.1. Measured 0.903 (loss 1.95 -> 0.29, 12 s on 2 cores).
  EXPECT_GE(run.test_accuracy, 0.8);
}

}  // namespace
}  // namespace kiln

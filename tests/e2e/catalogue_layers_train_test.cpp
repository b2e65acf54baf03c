// The catalogue's other new layers train on the real digits on the CPU: an inverted residual block
// with hard-swish, squeeze-and-excitation (adaptive average pool to 1x1, two biased 1x1
// convolutions, a hard-sigmoid gate multiplied onto the map) and stochastic depth on its branch,
// after a ceil-mode max pool, and a SiLU convolution read through an adaptive average pool to 2x2
// and a flatten by the classifier. Six epochs, far past chance.
#include <gtest/gtest.h>

#include "digits_training.h"

namespace kiln {
namespace {

ConvAttrs depthwise(int channels, int stride) {
  ConvAttrs a = ConvAttrs::square(channels, 3, stride, 1);
  a.groups = channels;
  return a;
}

TEST(TrainDigits, SqueezeExcitationStochasticDepthAndAdaptivePoolingTrainASmallCnn) {
  Blueprint m("small_se");
  m.input(20, 20, 1).cbr(16, 3, 1, 1, "stem");
  PoolAttrs pool = PoolAttrs::square(3, 2);
  pool.ceil_mode = true;  // 20 -> 10 (floor mode: 9)
  m.maxpool(pool, "pool");
  Blueprint block("block");
  block.conv(48, 1, 1, 0, false, "expand").bn("expand_bn").hardswish("expand_act");
  block.conv(depthwise(48, 1), "dw").bn("dw_bn").hardswish("dw_act");
  const Blueprint::Ref x = block.last();
  block.adaptive_avgpool(1, 1, "se.pool").conv(ConvAttrs::square(12, 1, 1, 0, true), "se.fc1").relu("se.act");
  block.conv(ConvAttrs::square(48, 1, 1, 0, true), "se.fc2").hardsigmoid("se.gate");
  block.mul(block.last(), x, "se");
  block.conv(16, 1, 1, 0, false, "project").bn("project_bn").stochastic_depth(0.1f, "drop_path");
  m.residual(block, std::nullopt, /*relu_after=*/false, "res");
  m.conv(32, 3, 2, 1, false, "down").bn("down_bn").silu("down_act");  // 5x5
  m.adaptive_avgpool(2, 2, "head_pool").flatten("flatten").fc(10, true, "fc");
  const testing::DigitsRun run = testing::train_on_digits(m, 6, "small_se");
  EXPECT_LT(run.last_loss, run.first_loss);
  // Chance is 0.1. Measured 0.962 (loss 1.13 -> 0.087, 7 s on 2 cores).
  EXPECT_GE(run.test_accuracy, 0.8);
}

}  // namespace
}  // namespace kiln

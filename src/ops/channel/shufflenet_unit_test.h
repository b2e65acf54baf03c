#pragma once
// ShuffleNetV2's stride-1 unit as the channel family's tests build it (test-only: it reads the DSL).
#include <string>

#include "kiln/blueprint.h"

namespace kiln::channel_test {

// torchvision's InvertedResidual with stride 1 on `channels`: x1, x2 = x.chunk(2, dim=1); branch2 on
// x2 (1x1 conv, BN, ReLU, depthwise 3x3, BN, 1x1 conv, BN, ReLU); cat(x1, branch2(x2)); shuffled in
// `groups`. The tests that run the real unit (gradient check, ONNX export) build it here.
inline void shufflenet_unit(Blueprint& m, const std::string& name, int channels, int groups) {
  const int half = channels / 2;
  ConvAttrs depthwise = ConvAttrs::square(half, 3, 1, 1);
  depthwise.groups = half;
  const Blueprint::Ref x = m.last();
  m.channel_slice(0, half, name + ".x1");
  const Blueprint::Ref x1 = m.last();
  m.from(x).channel_slice(half, half, name + ".x2");
  m.conv(half, 1, 1, 0, false, name + ".branch2.0").bn(name + ".branch2.1").relu(name + ".branch2.2");
  m.conv(depthwise, name + ".branch2.3").bn(name + ".branch2.4");
  m.conv(half, 1, 1, 0, false, name + ".branch2.5").bn(name + ".branch2.6").relu(name + ".branch2.7");
  m.concat({x1, m.last()}, name + ".cat").channel_shuffle(groups, name + ".channel_shuffle");
}

}  // namespace kiln::channel_test

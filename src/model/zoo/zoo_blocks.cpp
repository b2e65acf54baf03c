#include "model/zoo/zoo_blocks.h"

#include <algorithm>

namespace kiln::zoo_blocks {

void activation(Blueprint& m, Act act, const std::string& name) {
  switch (act) {
    case Act::None: return;
    case Act::ReLU: m.relu(name); return;
    case Act::ReLU6: m.relu6(name); return;
    case Act::Hardswish: m.hardswish(name); return;
    case Act::SiLU: m.silu(name); return;
    case Act::Sigmoid: m.sigmoid(name); return;
    case Act::Hardsigmoid: m.hardsigmoid(name); return;
  }
}

int make_divisible(double v, int divisor) {
  int rounded = std::max(divisor, int(v + divisor / 2.0) / divisor * divisor);
  if (rounded < 0.9 * v) rounded += divisor;
  return rounded;
}

void conv_norm_activation(Blueprint& m, const std::string& name, int out_channels, int kernel, int stride,
                          int groups, Act act, const BatchNormAttrs& bn, int dilation) {
  ConvAttrs conv = ConvAttrs::square(out_channels, kernel, stride, (kernel - 1) / 2 * dilation);
  conv.groups = groups;
  conv.dilation_h = conv.dilation_w = dilation;
  m.conv(conv, name + ".0").bn(name + ".1", bn.eps, bn.momentum);
  activation(m, act, name + ".2");
}

void squeeze_excitation(Blueprint& m, const std::string& name, int channels, int squeeze_channels, Act act,
                        Act scale_activation, WeightInit init, BiasInit bias_init) {
  const Blueprint::Ref input = m.last();
  ConvAttrs fc1 = ConvAttrs::square(squeeze_channels, 1, 1, 0, /*bias=*/true);
  ConvAttrs fc2 = ConvAttrs::square(channels, 1, 1, 0, /*bias=*/true);
  fc1.init = fc2.init = init;
  fc1.bias_init = fc2.bias_init = bias_init;
  m.adaptive_avgpool(1, 1, name + ".avgpool").conv(fc1, name + ".fc1");
  activation(m, act, name + ".activation");
  m.conv(fc2, name + ".fc2");
  activation(m, scale_activation, name + ".scale_activation");
  m.mul(m.last(), input, name);
}

}  // namespace kiln::zoo_blocks

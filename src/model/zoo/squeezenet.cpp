// torchvision's SqueezeNet 1.0 and 1.1 (torchvision.models.squeezenet): Fire modules (a 1x1
// squeeze, then 1x1 and 3x3 expansions side by side, every convolution biased and followed by
// ReLU), ceil-mode max pooling, and a convolutional classifier averaged over the map.
#include <fmt/format.h>

#include <string>

#include "model/zoo_family.h"

namespace kiln {
namespace {

// torchvision initializes every convolution but the last with kaiming_uniform_ (fan-in, ReLU's
// gain), the last from N(0, 0.01²), all biases at zero.
ConvAttrs fire_conv(int out_channels, int kernel, int padding) {
  ConvAttrs conv = ConvAttrs::square(out_channels, kernel, 1, padding, /*bias=*/true);
  conv.init = WeightInit::kaiming_uniform_fan_in();
  return conv;
}

// The Fire module at features.<index>: squeeze, then expand1x1 and expand3x3 of the squeezed map,
// concatenated along the channels.
void fire(Blueprint& m, int index, int squeeze, int expand1x1, int expand3x3) {
  const std::string name = fmt::format("features.{}", index);
  m.conv(fire_conv(squeeze, 1, 0), name + ".squeeze").relu(name + ".squeeze_activation");
  const Blueprint::Ref squeezed = m.last();
  m.conv(fire_conv(expand1x1, 1, 0), name + ".expand1x1").relu(name + ".expand1x1_activation");
  const Blueprint::Ref left = m.last();
  m.from(squeezed).conv(fire_conv(expand3x3, 3, 1), name + ".expand3x3").relu(name + ".expand3x3_activation");
  m.concat({left, m.last()}, name);
}

void ceil_maxpool(Blueprint& m, int index) {
  PoolAttrs pool = PoolAttrs::square(3, 2);
  pool.ceil_mode = true;
  m.maxpool(pool, fmt::format("features.{}", index));
}

void classifier(Blueprint& m, int num_classes) {
  ConvAttrs final_conv = ConvAttrs::square(num_classes, 1, 1, 0, /*bias=*/true);
  final_conv.init = WeightInit::normal(0.01);
  m.dropout(0.5, "classifier.0").conv(final_conv, "classifier.1").relu("classifier.2");
  m.global_avgpool("classifier.3");  // AdaptiveAvgPool2d((1, 1)) and torch.flatten
}

Blueprint squeezenet1_0(int num_classes) {
  Blueprint m("squeezenet1_0");
  m.input(224, 224, 3);
  ConvAttrs stem = fire_conv(96, 7, 0);
  stem.stride_h = stem.stride_w = 2;
  m.conv(stem, "features.0").relu("features.1");
  ceil_maxpool(m, 2);
  fire(m, 3, 16, 64, 64);
  fire(m, 4, 16, 64, 64);
  fire(m, 5, 32, 128, 128);
  ceil_maxpool(m, 6);
  fire(m, 7, 32, 128, 128);
  fire(m, 8, 48, 192, 192);
  fire(m, 9, 48, 192, 192);
  fire(m, 10, 64, 256, 256);
  ceil_maxpool(m, 11);
  fire(m, 12, 64, 256, 256);
  classifier(m, num_classes);
  return m;
}

Blueprint squeezenet1_1(int num_classes) {
  Blueprint m("squeezenet1_1");
  m.input(224, 224, 3);
  ConvAttrs stem = fire_conv(64, 3, 0);
  stem.stride_h = stem.stride_w = 2;
  m.conv(stem, "features.0").relu("features.1");
  ceil_maxpool(m, 2);
  fire(m, 3, 16, 64, 64);
  fire(m, 4, 16, 64, 64);
  ceil_maxpool(m, 5);
  fire(m, 6, 32, 128, 128);
  fire(m, 7, 32, 128, 128);
  ceil_maxpool(m, 8);
  fire(m, 9, 48, 192, 192);
  fire(m, 10, 48, 192, 192);
  fire(m, 11, 64, 256, 256);
  fire(m, 12, 64, 256, 256);
  classifier(m, num_classes);
  return m;
}

}  // namespace

extern const ZooFamily kSqueezenetModels{
    "squeezenet", {{"squeezenet1_0", squeezenet1_0, 1000}, {"squeezenet1_1", squeezenet1_1, 1000}}};

}  // namespace kiln

// torchvision's MobileNetV2 (torchvision.models.mobilenetv2): inverted residual blocks of a 1x1
// expansion, a depthwise 3x3 and a linear 1x1 projection, ReLU6 after the first two.
#include <fmt/format.h>

#include "model/zoo_family.h"

namespace kiln {
namespace {

// torchvision's Conv2dNormActivation: a bias-free convolution padded to keep the size, BatchNorm
// and ReLU6, named "<name>.0", ".1" and ".2" as its nn.Sequential numbers them.
void conv_bn_relu6(Blueprint& m, const std::string& name, int out_channels, int kernel, int stride, int groups = 1) {
  ConvAttrs conv = ConvAttrs::square(out_channels, kernel, stride, (kernel - 1) / 2);
  conv.groups = groups;
  m.conv(conv, name + ".0").bn(name + ".1").relu6(name + ".2");
}

// The InvertedResidual block at features.<index>: its layers are that module's `conv` Sequential;
// the input is added back when the block keeps the size and the channels.
void inverted_residual(Blueprint& m, int index, int in_channels, int out_channels, int stride, int expand_ratio) {
  const int hidden = in_channels * expand_ratio;
  Blueprint body("conv");
  int layer = 0;
  if (expand_ratio != 1) conv_bn_relu6(body, fmt::format("conv.{}", layer++), hidden, 1, 1);
  conv_bn_relu6(body, fmt::format("conv.{}", layer++), hidden, 3, stride, hidden);  // depthwise
  body.conv(out_channels, 1, 1, 0, false, fmt::format("conv.{}", layer)).bn(fmt::format("conv.{}", layer + 1));
  const std::string name = fmt::format("features.{}", index);
  if (stride == 1 && in_channels == out_channels) {
    m.residual(body, std::nullopt, /*relu_after=*/false, name);
  } else {
    m.seq(body, name);
  }
}

Blueprint mobilenet_v2(int num_classes) {
  Blueprint m("mobilenet_v2");
  m.input(224, 224, 3);
  conv_bn_relu6(m, "features.0", 32, 3, 2);
  // torchvision's settings at width 1.0: expansion t, channels c, blocks n, first stride s.
  struct Stage {
    int t, c, n, s;
  };
  const Stage stages[] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                          {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  int in_channels = 32, index = 1;
  for (const Stage& st : stages) {
    for (int i = 0; i < st.n; ++i) {
      inverted_residual(m, index++, in_channels, st.c, i == 0 ? st.s : 1, st.t);
      in_channels = st.c;
    }
  }
  conv_bn_relu6(m, fmt::format("features.{}", index), 1280, 1, 1);
  m.global_avgpool("avgpool");
  // torchvision initializes the classifier from N(0, 0.01²) with a zero bias.
  m.dropout(0.2, "classifier.0").fc(num_classes, true, "classifier.1", 0.01f);
  return m;
}

}  // namespace

extern const ZooFamily kMobilenetV2Models{"mobilenet_v2", {{"mobilenet_v2", mobilenet_v2, 1000}}};

}  // namespace kiln

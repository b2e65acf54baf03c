// torchvision's ShuffleNetV2 (torchvision.models.shufflenetv2): a 3x3 stride-2 stem and max pool,
// three stages of inverted-residual units, a 1x1 convolution and the mean over the map before the
// classifier. A unit splits or duplicates its input into two branches, puts their outputs side by
// side and shuffles the channels of the two halves together: a stride-2 unit runs both branches on
// the whole input; a stride-1 unit passes the first half of the channels through and runs
// branch2 on the second (x.chunk(2, dim=1)). Every layer keeps nn.Conv2d's and nn.Linear's default
// initialization, as torchvision's does.
#include <fmt/format.h>

#include <array>

#include "model/zoo_family.h"

namespace kiln {
namespace {

ConvAttrs conv(int out_channels, int kernel, int stride, int padding, int groups) {
  ConvAttrs c = ConvAttrs::square(out_channels, kernel, stride, padding);
  c.groups = groups;
  c.init = WeightInit::torch_default();
  return c;
}

// branch1 (stride 2 only): depthwise 3x3, BN, 1x1 to half the output, BN, ReLU.
void branch1(Blueprint& m, const std::string& name, int in, int half, int stride) {
  m.conv(conv(in, 3, stride, 1, in), name + ".0").bn(name + ".1");
  m.conv(conv(half, 1, 1, 0, 1), name + ".2").bn(name + ".3").relu(name + ".4");
}

// branch2: 1x1, BN, ReLU, depthwise 3x3 (the unit's stride), BN, 1x1, BN, ReLU.
void branch2(Blueprint& m, const std::string& name, int half, int stride) {
  m.conv(conv(half, 1, 1, 0, 1), name + ".0").bn(name + ".1").relu(name + ".2");
  m.conv(conv(half, 3, stride, 1, half), name + ".3").bn(name + ".4");
  m.conv(conv(half, 1, 1, 0, 1), name + ".5").bn(name + ".6").relu(name + ".7");
}

// InvertedResidual(in, out, stride) at `name` ("stage2.0").
void unit(Blueprint& m, const std::string& name, int in, int out, int stride) {
  const int half = out / 2;
  const Blueprint::Ref x = m.last();
  Blueprint::Ref first = x;
  if (stride > 1) {
    branch1(m, name + ".branch1", in, half, stride);
    first = m.last();
    m.from(x);
  } else {
    m.channel_slice(0, half, name + ".x1");  // x.chunk(2, dim=1)
    first = m.last();
    m.from(x).channel_slice(half, half, name + ".x2");
  }
  branch2(m, name + ".branch2", half, stride);
  m.concat({first, m.last()}, name + ".cat").channel_shuffle(2, name + ".channel_shuffle");
}

// ShuffleNetV2(stages_repeats [4, 8, 4], stages_out_channels).
Blueprint shufflenet_v2(const char* name, const std::array<int, 5>& channels, int num_classes) {
  Blueprint m(name);
  m.input(224, 224, 3);
  m.conv(conv(channels[0], 3, 2, 1, 1), "conv1.0").bn("conv1.1").relu("conv1.2");
  m.maxpool(3, 2, 1, "maxpool");
  const std::array<int, 3> repeats = {4, 8, 4};
  int in = channels[0];
  for (int s = 0; s < 3; ++s) {
    const int out = channels[size_t(s) + 1];
    for (int i = 0; i < repeats[size_t(s)]; ++i) unit(m, fmt::format("stage{}.{}", s + 2, i), i == 0 ? in : out, out, i == 0 ? 2 : 1);
    in = out;
  }
  m.conv(conv(channels[4], 1, 1, 0, 1), "conv5.0").bn("conv5.1").relu("conv5.2");
  m.global_avgpool("mean").fc(num_classes, true, "fc");  // x.mean([2, 3]), then nn.Linear's default init
  return m;
}

Blueprint shufflenet_v2_x0_5(int n) { return shufflenet_v2("shufflenet_v2_x0_5", {24, 48, 96, 192, 1024}, n); }
Blueprint shufflenet_v2_x1_0(int n) { return shufflenet_v2("shufflenet_v2_x1_0", {24, 116, 232, 464, 1024}, n); }
Blueprint shufflenet_v2_x1_5(int n) { return shufflenet_v2("shufflenet_v2_x1_5", {24, 176, 352, 704, 1024}, n); }
Blueprint shufflenet_v2_x2_0(int n) { return shufflenet_v2("shufflenet_v2_x2_0", {24, 244, 488, 976, 2048}, n); }

}  // namespace

extern const ZooFamily kShufflenetV2Models{"shufflenet_v2",
                                           {{"shufflenet_v2_x0_5", shufflenet_v2_x0_5, 1000},
                                            {"shufflenet_v2_x1_0", shufflenet_v2_x1_0, 1000},
                                            {"shufflenet_v2_x1_5", shufflenet_v2_x1_5, 1000},
                                            {"shufflenet_v2_x2_0", shufflenet_v2_x2_0, 1000}}};

}  // namespace kiln

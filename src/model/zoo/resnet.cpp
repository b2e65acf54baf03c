// torchvision's ResNet family (torchvision.models.resnet): ResNet, ResNeXt and Wide ResNet are one
// generator, the residual block's width and groups telling them apart; and kiln's CIFAR variants
// (a 3x3 stem without max pooling, for 32x32 images).
#include <fmt/format.h>

#include "model/zoo_family.h"

namespace kiln {
namespace {

struct ResNetSpec {
  bool bottleneck;
  int blocks[4];
  int groups = 1;             // the 3x3 convolution's groups (ResNeXt's cardinality)
  int width_per_group = 64;   // channels per group at planes 64 (ResNeXt: 4 or 8; Wide ResNet: 128)
  bool cifar_stem = false;
};

// torchvision's BasicBlock: conv3x3(stride)-BN-ReLU, conv3x3-BN, + shortcut, ReLU.
void basic_block(Blueprint& m, const std::string& name, int in_ch, int planes, int stride) {
  Blueprint body("body");
  body.cbr(planes, 3, stride, 1, "conv1").conv(planes, 3, 1, 1, false, "conv2").bn("bn2");
  std::optional<Blueprint> shortcut;
  if (stride != 1 || in_ch != planes) {
    shortcut = Blueprint("downsample");
    shortcut->conv(planes, 1, stride, 0, false, "0").bn("1");
  }
  m.residual(body, shortcut, true, name);
}

// torchvision's Bottleneck (v1.5: the stride on the 3x3): 1x1, 3x3(stride, groups), 1x1 x4, +
// shortcut. Its width is planes x width_per_group / 64 x groups, as torchvision computes it.
void bottleneck_block(Blueprint& m, const std::string& name, int in_ch, int planes, int stride,
                      const ResNetSpec& spec) {
  const int width = planes * spec.width_per_group / 64 * spec.groups;
  ConvBnAttrs conv2{ConvAttrs::square(width, 3, stride, 1), BatchNormAttrs{}};
  conv2.conv.groups = spec.groups;
  Blueprint body("body");
  body.cbr(width, 1, 1, 0, "conv1").cbr(conv2, "conv2");
  body.conv(planes * 4, 1, 1, 0, false, "conv3").bn("bn3");
  std::optional<Blueprint> shortcut;
  if (stride != 1 || in_ch != planes * 4) {
    shortcut = Blueprint("downsample");
    shortcut->conv(planes * 4, 1, stride, 0, false, "0").bn("1");
  }
  m.residual(body, shortcut, true, name);
}

Blueprint resnet(const std::string& name, const ResNetSpec& spec, int num_classes) {
  Blueprint m(name);
  if (spec.cifar_stem) {
    m.input(32, 32, 3);
    m.cbr(64, 3, 1, 1, "conv1");
  } else {
    m.input(224, 224, 3);
    m.cbr(64, 7, 2, 3, "conv1").maxpool(3, 2, 1, "maxpool");
  }
  const int expansion = spec.bottleneck ? 4 : 1;
  int in_ch = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int planes = 64 << stage;
    for (int b = 0; b < spec.blocks[stage]; ++b) {
      const int stride = (stage > 0 && b == 0) ? 2 : 1;
      const std::string block = fmt::format("layer{}.{}", stage + 1, b);
      if (spec.bottleneck) {
        bottleneck_block(m, block, in_ch, planes, stride, spec);
      } else {
        basic_block(m, block, in_ch, planes, stride);
      }
      in_ch = planes * expansion;
    }
  }
  m.global_avgpool("avgpool").fc(num_classes, true, "fc");
  return m;
}

constexpr ResNetSpec kResNet18{false, {2, 2, 2, 2}};
constexpr ResNetSpec kResNet34{false, {3, 4, 6, 3}};
constexpr ResNetSpec kResNet50{true, {3, 4, 6, 3}};
constexpr ResNetSpec kResNet101{true, {3, 4, 23, 3}};
constexpr ResNetSpec kResNet152{true, {3, 8, 36, 3}};

}  // namespace

extern const ZooFamily kResnetModels{
    "resnet",
    {
        {"resnet18", [](int n) { return resnet("resnet18", kResNet18, n); }, 1000},
        {"resnet34", [](int n) { return resnet("resnet34", kResNet34, n); }, 1000},
        {"resnet50", [](int n) { return resnet("resnet50", kResNet50, n); }, 1000},
        {"resnet101", [](int n) { return resnet("resnet101", kResNet101, n); }, 1000},
        {"resnet152", [](int n) { return resnet("resnet152", kResNet152, n); }, 1000},
        {"resnext50_32x4d", [](int n) { return resnet("resnext50_32x4d", {true, {3, 4, 6, 3}, 32, 4}, n); }, 1000},
        {"resnext101_32x8d", [](int n) { return resnet("resnext101_32x8d", {true, {3, 4, 23, 3}, 32, 8}, n); }, 1000},
        {"resnext101_64x4d", [](int n) { return resnet("resnext101_64x4d", {true, {3, 4, 23, 3}, 64, 4}, n); }, 1000},
        {"wide_resnet50_2", [](int n) { return resnet("wide_resnet50_2", {true, {3, 4, 6, 3}, 1, 128}, n); }, 1000},
        {"wide_resnet101_2", [](int n) { return resnet("wide_resnet101_2", {true, {3, 4, 23, 3}, 1, 128}, n); },
         1000},
        {"resnet18_cifar", [](int n) { return resnet("resnet18_cifar", {false, {2, 2, 2, 2}, 1, 64, true}, n); }, 10},
        {"resnet50_cifar", [](int n) { return resnet("resnet50_cifar", {true, {3, 4, 6, 3}, 1, 64, true}, n); }, 10},
    }};

}  // namespace kiln

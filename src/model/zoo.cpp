#include "kiln/zoo.h"

#include <fmt/format.h>

#include <functional>
#include <map>

#include "kiln/error.h"

namespace kiln::zoo {

// Two 3x3 stages with max pooling, then a small classifier: about 0.3 MFLOP-scale per
// image per layer, so the digits demo trains to >98.5% in well under a minute on 2 cores.
Blueprint digits_cnn(int num_classes) {
  Blueprint m("digits_cnn");
  m.input(20, 20, 1);
  m.cbr(32, 3, 1, 1, "conv1").cbr(32, 3, 1, 1, "conv2").maxpool(2, 2, 0, "pool1");
  m.cbr(64, 3, 1, 1, "conv3").cbr(64, 3, 1, 1, "conv4").maxpool(2, 2, 0, "pool2");
  m.flatten("flatten").fc(128, true, "fc1").relu("relu1").dropout(0.25f, "drop1");
  m.fc(num_classes, true, "fc2");
  return m;
}

namespace {

// VGG16 feature extractor: 13 conv3x3 layers, each followed by BN and ReLU (one CBR each).
// torchvision's convs carry a bias that the following BN cancels exactly; CBR omits it.
void vgg16_features(Blueprint& m) {
  const int cfg[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
  int index = 0;
  for (int c : cfg) {
    if (c == 0) {
      m.maxpool(2, 2, 0, fmt::format("features.{}", index++));
    } else {
      m.cbr(c, 3, 1, 1, fmt::format("features.{}", index++));
    }
  }
}

// torchvision BasicBlock: conv3x3(stride)-BN-ReLU, conv3x3-BN, + shortcut, ReLU.
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

// torchvision Bottleneck (v1.5: stride on the 3x3): 1x1, 3x3(stride), 1x1 x4, + shortcut.
void bottleneck_block(Blueprint& m, const std::string& name, int in_ch, int planes, int stride) {
  Blueprint body("body");
  body.cbr(planes, 1, 1, 0, "conv1").cbr(planes, 3, stride, 1, "conv2");
  body.conv(planes * 4, 1, 1, 0, false, "conv3").bn("bn3");
  std::optional<Blueprint> shortcut;
  if (stride != 1 || in_ch != planes * 4) {
    shortcut = Blueprint("downsample");
    shortcut->conv(planes * 4, 1, stride, 0, false, "0").bn("1");
  }
  m.residual(body, shortcut, true, name);
}

Blueprint resnet(const std::string& name, bool bottleneck, const int (&blocks)[4], bool cifar_stem,
                 int num_classes) {
  Blueprint m(name);
  if (cifar_stem) {
    m.input(32, 32, 3);
    m.cbr(64, 3, 1, 1, "conv1");
  } else {
    m.input(224, 224, 3);
    m.cbr(64, 7, 2, 3, "conv1").maxpool(3, 2, 1, "maxpool");
  }
  const int expansion = bottleneck ? 4 : 1;
  int in_ch = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int planes = 64 << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      const int stride = (stage > 0 && b == 0) ? 2 : 1;
      const std::string block = fmt::format("layer{}.{}", stage + 1, b);
      if (bottleneck) {
        bottleneck_block(m, block, in_ch, planes, stride);
      } else {
        basic_block(m, block, in_ch, planes, stride);
      }
      in_ch = planes * expansion;
    }
  }
  m.global_avgpool("avgpool").fc(num_classes, true, "fc");
  return m;
}

}  // namespace

Blueprint vgg16_bn(int num_classes) {
  Blueprint m("vgg16_bn");
  m.input(224, 224, 3);
  vgg16_features(m);
  m.flatten("flatten");
  // torchvision initializes VGG's linear layers from N(0, 0.01²) with zero biases.
  m.fc(4096, true, "classifier.0", 0.01f).relu("classifier.1").dropout(0.5f, "classifier.2");
  m.fc(4096, true, "classifier.3", 0.01f).relu("classifier.4").dropout(0.5f, "classifier.5");
  m.fc(num_classes, true, "classifier.6", 0.01f);
  return m;
}

Blueprint vgg16_bn_cifar(int num_classes) {
  Blueprint m("vgg16_bn_cifar");
  m.input(32, 32, 3);
  vgg16_features(m);
  m.flatten("flatten").fc(num_classes, true, "classifier");
  return m;
}

Blueprint resnet18(int num_classes) { return resnet("resnet18", false, {2, 2, 2, 2}, false, num_classes); }
Blueprint resnet50(int num_classes) { return resnet("resnet50", true, {3, 4, 6, 3}, false, num_classes); }
Blueprint resnet18_cifar(int num_classes) {
  return resnet("resnet18_cifar", false, {2, 2, 2, 2}, true, num_classes);
}
Blueprint resnet50_cifar(int num_classes) {
  return resnet("resnet50_cifar", true, {3, 4, 6, 3}, true, num_classes);
}

namespace {
struct Entry {
  std::function<Blueprint(int)> make;
  int default_classes;
};
const std::map<std::string, Entry>& table() {
  static const std::map<std::string, Entry> models = {
      {"digits_cnn", {digits_cnn, 10}},         {"vgg16_bn", {vgg16_bn, 1000}},
      {"vgg16_bn_cifar", {vgg16_bn_cifar, 10}}, {"resnet18", {resnet18, 1000}},
      {"resnet50", {resnet50, 1000}},           {"resnet18_cifar", {resnet18_cifar, 10}},
      {"resnet50_cifar", {resnet50_cifar, 10}},
  };
  return models;
}
}  // namespace

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const auto& [name, entry] : table()) out.push_back(name);
  return out;
}

Blueprint by_name(const std::string& name, int num_classes) {
  auto it = table().find(name);
  if (it == table().end())
    fail("unknown model '{}': known models are {}", name, fmt::join(names(), ", "));
  if (num_classes == 0 || num_classes < -1)
    fail("model '{}': number of classes must be positive, got {}", name, num_classes);
  return it->second.make(num_classes > 0 ? num_classes : it->second.default_classes);
}

}  // namespace kiln::zoo

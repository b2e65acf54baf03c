// torchvision's VGG family (torchvision.models.vgg): configurations A, B, D and E (vgg11, 13, 16,
// 19), with and without BatchNorm, and kiln's vgg16_bn_cifar for 32x32 images.
//
// One difference from torchvision, exact in what it computes: the BatchNorm variants' convolutions
// are CBR layers without the bias torchvision gives them: BatchNorm's mean subtraction cancels that
// bias in training, and in evaluation it folds into the running mean (kiln::load_torch_weights
// does; `kiln export --torch` writes a zero one).
//
// As torchvision's, the features are pooled to 7x7 ("avgpool", AdaptiveAvgPool2d((7, 7))) before
// the classifier, so any input of at least 32x32 works; at the 224x224 input these models are made
// for the features are 7x7 already and the pooling is a view (no op, no memory).
#include <fmt/format.h>

#include <vector>

#include "model/zoo_family.h"

namespace kiln {
namespace {

constexpr int kPool = 0;  // a 2x2 max pooling in a configuration, between convolutions' widths
const std::vector<int> kVgg11{64, kPool, 128, kPool, 256, 256, kPool, 512, 512, kPool, 512, 512, kPool};
const std::vector<int> kVgg13{64, 64, kPool, 128, 128, kPool, 256, 256, kPool, 512, 512, kPool, 512, 512, kPool};
const std::vector<int> kVgg16{64,  64,  kPool, 128, 128, kPool, 256, 256, 256,  kPool,
                              512, 512, 512,   kPool, 512, 512, 512, kPool};
const std::vector<int> kVgg19{64,  64,  kPool, 128, 128, kPool, 256, 256, 256, 256, kPool,
                              512, 512, 512,   512, kPool, 512, 512, 512, 512, kPool};

// The feature extractor. With BatchNorm each width is one CBR layer (numbered one a layer:
// kiln::torch_names gives PyTorch's numbers, three a CBR); without, a biased 3x3 convolution and
// its ReLU under torchvision's own numbers.
void features(Blueprint& m, const std::vector<int>& cfg, bool batch_norm) {
  int index = 0;
  for (int c : cfg) {
    if (c == kPool) {
      m.maxpool(2, 2, 0, fmt::format("features.{}", index++));
    } else if (batch_norm) {
      m.cbr(c, 3, 1, 1, fmt::format("features.{}", index++));
    } else {
      m.conv(c, 3, 1, 1, true, fmt::format("features.{}", index)).relu(fmt::format("features.{}", index + 1));
      index += 2;
    }
  }
}

Blueprint vgg(const std::string& name, const std::vector<int>& cfg, bool batch_norm, int num_classes) {
  Blueprint m(name);
  m.input(224, 224, 3);
  features(m, cfg, batch_norm);
  m.adaptive_avgpool(7, 7, "avgpool").flatten("flatten");
  // torchvision initializes VGG's linear layers from N(0, 0.01²) with zero biases.
  m.fc(4096, true, "classifier.0", 0.01f).relu("classifier.1").dropout(0.5, "classifier.2");
  m.fc(4096, true, "classifier.3", 0.01f).relu("classifier.4").dropout(0.5, "classifier.5");
  m.fc(num_classes, true, "classifier.6", 0.01f);
  return m;
}

Blueprint vgg16_bn_cifar(int num_classes) {
  Blueprint m("vgg16_bn_cifar");
  m.input(32, 32, 3);
  features(m, kVgg16, true);
  m.flatten("flatten").fc(num_classes, true, "classifier");
  return m;
}

}  // namespace

extern const ZooFamily kVggModels{
    "vgg",
    {
        {"vgg11", [](int n) { return vgg("vgg11", kVgg11, false, n); }, 1000},
        {"vgg11_bn", [](int n) { return vgg("vgg11_bn", kVgg11, true, n); }, 1000},
        {"vgg13", [](int n) { return vgg("vgg13", kVgg13, false, n); }, 1000},
        {"vgg13_bn", [](int n) { return vgg("vgg13_bn", kVgg13, true, n); }, 1000},
        {"vgg16", [](int n) { return vgg("vgg16", kVgg16, false, n); }, 1000},
        {"vgg16_bn", [](int n) { return vgg("vgg16_bn", kVgg16, true, n); }, 1000},
        {"vgg19", [](int n) { return vgg("vgg19", kVgg19, false, n); }, 1000},
        {"vgg19_bn", [](int n) { return vgg("vgg19_bn", kVgg19, true, n); }, 1000},
        {"vgg16_bn_cifar", vgg16_bn_cifar, 10},
    }};

}  // namespace kiln

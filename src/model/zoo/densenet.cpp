// torchvision's DenseNet-BC family (torchvision.models.densenet; Huang et al., "Densely Connected
// Convolutional Networks", 2017): four dense blocks in which every layer reads the channel
// concatenation of the block's input and of all earlier layers' outputs, joined by transitions that
// halve the channels and the size. torchvision's memory_efficient option recomputes the
// concatenations in the backward pass; the math, and so this graph, is the same.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "model/zoo_family.h"

namespace kiln {
namespace {

struct DenseNetParams {
  int growth_rate;      // the channels each dense layer adds (k in the paper)
  int blocks[4];        // dense layers per block
  int init_features;    // the stem convolution's channels
  int bn_size = 4;      // a dense layer's 1x1 bottleneck is bn_size x growth_rate wide
};

// torchvision initializes every convolution with kaiming_normal_'s defaults (fan_in, ReLU's gain).
ConvAttrs densenet_conv(int out_channels, int kernel, int stride, int padding) {
  ConvAttrs conv = ConvAttrs::square(out_channels, kernel, stride, padding);
  conv.init = WeightInit::kaiming_normal_fan_in();
  return conv;
}

// torchvision's _DenseBlock at features.denseblock<index>: layer j (denselayer<j>, from 1) reads the
// block's input and layers 1..j-1 side by side (its forward's torch.cat; the first reads the input
// alone) through norm1 -> relu1 -> conv1 (1x1) -> norm2 -> relu2 -> conv2 (3x3); the block's output
// is the input and every layer's output side by side. Returns the output's channels.
int dense_block(Blueprint& m, int index, int in_channels, const DenseNetParams& p) {
  const std::string block = fmt::format("features.denseblock{}", index);
  std::vector<Blueprint::Ref> features = {m.last()};
  for (int j = 1; j <= p.blocks[index - 1]; ++j) {
    const std::string layer = fmt::format("{}.denselayer{}", block, j);
    if (features.size() > 1) m.concat(features, layer + ".cat");
    m.bn(layer + ".norm1").relu(layer + ".relu1");
    m.conv(densenet_conv(p.bn_size * p.growth_rate, 1, 1, 0), layer + ".conv1");
    m.bn(layer + ".norm2").relu(layer + ".relu2");
    m.conv(densenet_conv(p.growth_rate, 3, 1, 1), layer + ".conv2");
    features.push_back(m.last());
  }
  m.concat(features, block + ".cat");
  return in_channels + p.blocks[index - 1] * p.growth_rate;
}

// torchvision's _Transition at features.transition<index>: norm -> relu -> 1x1 conv to half the
// channels (rounded down) -> 2x2 average pooling of stride 2. Returns the output's channels.
int transition(Blueprint& m, int index, int in_channels) {
  const std::string name = fmt::format("features.transition{}", index);
  const int out_channels = in_channels / 2;
  m.bn(name + ".norm").relu(name + ".relu");
  m.conv(densenet_conv(out_channels, 1, 1, 0), name + ".conv");
  m.avgpool(2, 2, 0, name + ".pool");
  return out_channels;
}

Blueprint densenet(const std::string& name, const DenseNetParams& p, int num_classes) {
  Blueprint m(name);
  m.input(224, 224, 3);
  m.conv(densenet_conv(p.init_features, 7, 2, 3), "features.conv0");
  m.bn("features.norm0").relu("features.relu0").maxpool(3, 2, 1, "features.pool0");
  int channels = p.init_features;
  for (int index = 1; index <= 4; ++index) {
    channels = dense_block(m, index, channels, p);
    if (index < 4) channels = transition(m, index, channels);
  }
  m.bn("features.norm5");
  // torchvision's forward: F.relu, adaptive_avg_pool2d to 1x1 and flatten, then the classifier,
  // nn.Linear's default weight with the bias set to 0.
  m.relu("relu").global_avgpool("avgpool");
  LinearAttrs classifier{.out_features = num_classes, .bias = true};
  classifier.init = WeightInit::torch_default();
  classifier.bias_init = BiasInit::Zeros;
  m.fc(classifier, "classifier");
  return m;
}

// torchvision's settings: growth rate, layers per block, stem channels.
const DenseNetParams k121{32, {6, 12, 24, 16}, 64};
const DenseNetParams k161{48, {6, 12, 36, 24}, 96};
const DenseNetParams k169{32, {6, 12, 32, 32}, 64};
const DenseNetParams k201{32, {6, 12, 48, 32}, 64};

}  // namespace

extern const ZooFamily kDensenetModels{
    "densenet",
    {
        {"densenet121", [](int n) { return densenet("densenet121", k121, n); }, 1000},
        {"densenet161", [](int n) { return densenet("densenet161", k161, n); }, 1000},
        {"densenet169", [](int n) { return densenet("densenet169", k169, n); }, 1000},
        {"densenet201", [](int n) { return densenet("densenet201", k201, n); }, 1000},
    }};

}  // namespace kiln

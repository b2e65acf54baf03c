// torchvision's AlexNet (torchvision.models.alexnet): five biased convolutions with ReLU and
// three max poolings, a classifier of three linear layers with dropout; nn.Conv2d's and
// nn.Linear's own initialization (torchvision sets none of its own for AlexNet).
//
// As torchvision's, the features are pooled to 6x6 ("avgpool", AdaptiveAvgPool2d((6, 6))) before the
// classifier, so any input of at least 63x63 works; at the 224x224 input AlexNet is made for they
// are 6x6 already and the pooling is a view (no op, no memory).
#include <fmt/format.h>

#include "model/zoo_family.h"

namespace kiln {
namespace {

// A biased convolution with nn.Conv2d's default initialization, then its ReLU, numbered as
// torchvision's `features` Sequential numbers them.
void conv_relu(Blueprint& m, int index, int out_channels, int kernel, int stride, int padding) {
  ConvAttrs conv = ConvAttrs::square(out_channels, kernel, stride, padding, /*bias=*/true);
  conv.init = WeightInit::torch_default();
  conv.bias_init = BiasInit::TorchDefault;
  m.conv(conv, fmt::format("features.{}", index)).relu(fmt::format("features.{}", index + 1));
}

Blueprint alexnet(int num_classes) {
  Blueprint m("alexnet");
  m.input(224, 224, 3);
  conv_relu(m, 0, 64, 11, 4, 2);
  m.maxpool(3, 2, 0, "features.2");
  conv_relu(m, 3, 192, 5, 1, 2);
  m.maxpool(3, 2, 0, "features.5");
  conv_relu(m, 6, 384, 3, 1, 1);
  conv_relu(m, 8, 256, 3, 1, 1);
  conv_relu(m, 10, 256, 3, 1, 1);
  m.maxpool(3, 2, 0, "features.12");
  m.adaptive_avgpool(6, 6, "avgpool").flatten("flatten");
  m.dropout(0.5, "classifier.0").fc(4096, true, "classifier.1").relu("classifier.2");
  m.dropout(0.5, "classifier.3").fc(4096, true, "classifier.4").relu("classifier.5");
  m.fc(num_classes, true, "classifier.6");
  return m;
}

}  // namespace

extern const ZooFamily kAlexnetModels{"alexnet", {{"alexnet", alexnet, 1000}}};

}  // namespace kiln

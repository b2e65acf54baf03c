// torchvision's GoogLeNet (torchvision.models.googlenet) as it builds it for fine-tuning: without
// the auxiliary classifiers and without transform_input. Inception modules of four branches (1x1;
// 1x1 then 3x3; 1x1 then 3x3 again, where the paper has 5x5, as torchvision writes it; a ceil-mode
// 3x3 max pool then 1x1) concatenated along the channels; every convolution a BasicConv2d.
#include <fmt/format.h>

#include <string>

#include "model/zoo_family.h"

namespace kiln {
namespace {

// torchvision draws every convolution's and the classifier's weight from N(0, 0.01²) cut at ±2.
const WeightInit kInit = WeightInit::trunc_normal(0.01);

// BasicConv2d: a bias-free convolution, BatchNorm (eps 0.001) and ReLU, as "<name>.conv" and
// "<name>.bn" (the ReLU is F.relu, no module: "<name>.relu" here).
void basic_conv(Blueprint& m, const std::string& name, int out_channels, int kernel, int stride = 1,
                int padding = 0) {
  ConvAttrs conv = ConvAttrs::square(out_channels, kernel, stride, padding);
  conv.init = kInit;
  m.conv(conv, name + ".conv").bn(name + ".bn", 0.001).relu(name + ".relu");
}

void ceil_maxpool(Blueprint& m, const std::string& name, int kernel, int stride, int padding = 0) {
  PoolAttrs pool = PoolAttrs::square(kernel, stride, padding);
  pool.ceil_mode = true;
  m.maxpool(pool, name);
}

// The Inception module `name`: four branches of the module's input, side by side.
void inception(Blueprint& m, const std::string& name, int ch1x1, int ch3x3red, int ch3x3, int ch5x5red, int ch5x5,
               int pool_proj) {
  const Blueprint::Ref x = m.last();
  basic_conv(m, name + ".branch1", ch1x1, 1);
  const Blueprint::Ref b1 = m.last();
  m.from(x);
  basic_conv(m, name + ".branch2.0", ch3x3red, 1);
  basic_conv(m, name + ".branch2.1", ch3x3, 3, 1, 1);
  const Blueprint::Ref b2 = m.last();
  m.from(x);
  basic_conv(m, name + ".branch3.0", ch5x5red, 1);
  basic_conv(m, name + ".branch3.1", ch5x5, 3, 1, 1);
  const Blueprint::Ref b3 = m.last();
  m.from(x);
  ceil_maxpool(m, name + ".branch4.0", 3, 1, 1);
  basic_conv(m, name + ".branch4.1", pool_proj, 1);
  m.concat({b1, b2, b3, m.last()}, name);
}

Blueprint googlenet(int num_classes) {
  Blueprint m("googlenet");
  m.input(224, 224, 3);
  basic_conv(m, "conv1", 64, 7, 2, 3);
  ceil_maxpool(m, "maxpool1", 3, 2);
  basic_conv(m, "conv2", 64, 1);
  basic_conv(m, "conv3", 192, 3, 1, 1);
  ceil_maxpool(m, "maxpool2", 3, 2);
  inception(m, "inception3a", 64, 96, 128, 16, 32, 32);
  inception(m, "inception3b", 128, 128, 192, 32, 96, 64);
  ceil_maxpool(m, "maxpool3", 3, 2);
  inception(m, "inception4a", 192, 96, 208, 16, 48, 64);
  inception(m, "inception4b", 160, 112, 224, 24, 64, 64);
  inception(m, "inception4c", 128, 128, 256, 24, 64, 64);
  inception(m, "inception4d", 112, 144, 288, 32, 64, 64);
  inception(m, "inception4e", 256, 160, 320, 32, 128, 128);
  ceil_maxpool(m, "maxpool4", 2, 2);
  inception(m, "inception5a", 256, 160, 320, 32, 128, 128);
  inception(m, "inception5b", 384, 192, 384, 48, 128, 128);
  m.global_avgpool("avgpool").dropout(0.2, "dropout");
  // The classifier's bias keeps nn.Linear's default (torchvision initializes only the weight).
  m.fc(LinearAttrs{.out_features = num_classes, .init = kInit, .bias_init = BiasInit::TorchDefault}, "fc");
  return m;
}

}  // namespace

extern const ZooFamily kGooglenetModels{"googlenet", {{"googlenet", googlenet, 1000}}};

}  // namespace kiln

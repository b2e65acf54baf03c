// torchvision's Inception v3 (torchvision.models.inception_v3) as it builds it for fine-tuning:
// without the auxiliary classifier and without transform_input. Inception modules A-E of
// BasicConv2d branches (square, 1x7/7x1 and 1x3/3x1 kernels), average and max pooling,
// concatenated along the channels; 299x299 inputs.
#include <fmt/format.h>

#include <string>
#include <utility>

#include "model/zoo_family.h"

namespace kiln {
namespace {

// torchvision draws every convolution's and the classifier's weight from N(0, 0.1²) cut at ±2
// (the auxiliary classifier's layers, absent here, have their own standard deviations).
const WeightInit kInit = WeightInit::trunc_normal(0.1);

// BasicConv2d: a bias-free convolution of kernel kh x kw, BatchNorm (eps 0.001) and ReLU, as
// "<name>.conv" and "<name>.bn" (the ReLU is F.relu, no module: "<name>.relu" here).
void basic_conv(Blueprint& m, const std::string& name, int out_channels, int kh, int kw, int stride = 1, int ph = 0,
                int pw = 0) {
  ConvAttrs conv{.out_channels = out_channels, .kernel_h = kh, .kernel_w = kw, .stride_h = stride, .stride_w = stride,
                 .pad_top = ph, .pad_left = pw, .pad_bottom = ph, .pad_right = pw};
  conv.init = kInit;
  m.conv(conv, name + ".conv").bn(name + ".bn", 0.001).relu(name + ".relu");
}

void square_conv(Blueprint& m, const std::string& name, int out_channels, int k, int stride = 1, int pad = 0) {
  basic_conv(m, name, out_channels, k, k, stride, pad, pad);
}

// F.avg_pool2d(x, 3, stride=1, padding=1) (padding counted) then a 1x1 BasicConv2d: the pool
// branch of modules A, C and E.
Blueprint::Ref pool_branch(Blueprint& m, Blueprint::Ref x, const std::string& name, int out_channels) {
  m.from(x).avgpool(3, 1, 1, name + "_avgpool");
  square_conv(m, name, out_channels, 1);
  return m.last();
}

void inception_a(Blueprint& m, const std::string& n, int pool_features) {
  const Blueprint::Ref x = m.last();
  square_conv(m, n + ".branch1x1", 64, 1);
  const Blueprint::Ref b1 = m.last();
  m.from(x);
  square_conv(m, n + ".branch5x5_1", 48, 1);
  square_conv(m, n + ".branch5x5_2", 64, 5, 1, 2);
  const Blueprint::Ref b5 = m.last();
  m.from(x);
  square_conv(m, n + ".branch3x3dbl_1", 64, 1);
  square_conv(m, n + ".branch3x3dbl_2", 96, 3, 1, 1);
  square_conv(m, n + ".branch3x3dbl_3", 96, 3, 1, 1);
  const Blueprint::Ref b3 = m.last();
  const Blueprint::Ref bp = pool_branch(m, x, n + ".branch_pool", pool_features);
  m.concat({b1, b5, b3, bp}, n);
}

void inception_b(Blueprint& m, const std::string& n) {
  const Blueprint::Ref x = m.last();
  square_conv(m, n + ".branch3x3", 384, 3, 2);
  const Blueprint::Ref b3 = m.last();
  m.from(x);
  square_conv(m, n + ".branch3x3dbl_1", 64, 1);
  square_conv(m, n + ".branch3x3dbl_2", 96, 3, 1, 1);
  square_conv(m, n + ".branch3x3dbl_3", 96, 3, 2);
  const Blueprint::Ref bd = m.last();
  m.from(x).maxpool(3, 2, 0, n + ".branch_pool");
  m.concat({b3, bd, m.last()}, n);
}

// 1x7 and 7x1 convolutions padded to keep the size.
void conv_1x7(Blueprint& m, const std::string& name, int out) { basic_conv(m, name, out, 1, 7, 1, 0, 3); }
void conv_7x1(Blueprint& m, const std::string& name, int out) { basic_conv(m, name, out, 7, 1, 1, 3, 0); }

void inception_c(Blueprint& m, const std::string& n, int c7) {
  const Blueprint::Ref x = m.last();
  square_conv(m, n + ".branch1x1", 192, 1);
  const Blueprint::Ref b1 = m.last();
  m.from(x);
  square_conv(m, n + ".branch7x7_1", c7, 1);
  conv_1x7(m, n + ".branch7x7_2", c7);
  conv_7x1(m, n + ".branch7x7_3", 192);
  const Blueprint::Ref b7 = m.last();
  m.from(x);
  square_conv(m, n + ".branch7x7dbl_1", c7, 1);
  conv_7x1(m, n + ".branch7x7dbl_2", c7);
  conv_1x7(m, n + ".branch7x7dbl_3", c7);
  conv_7x1(m, n + ".branch7x7dbl_4", c7);
  conv_1x7(m, n + ".branch7x7dbl_5", 192);
  const Blueprint::Ref bd = m.last();
  const Blueprint::Ref bp = pool_branch(m, x, n + ".branch_pool", 192);
  m.concat({b1, b7, bd, bp}, n);
}

void inception_d(Blueprint& m, const std::string& n) {
  const Blueprint::Ref x = m.last();
  square_conv(m, n + ".branch3x3_1", 192, 1);
  square_conv(m, n + ".branch3x3_2", 320, 3, 2);
  const Blueprint::Ref b3 = m.last();
  m.from(x);
  square_conv(m, n + ".branch7x7x3_1", 192, 1);
  conv_1x7(m, n + ".branch7x7x3_2", 192);
  conv_7x1(m, n + ".branch7x7x3_3", 192);
  square_conv(m, n + ".branch7x7x3_4", 192, 3, 2);
  const Blueprint::Ref b7 = m.last();
  m.from(x).maxpool(3, 2, 0, n + ".branch_pool");
  m.concat({b3, b7, m.last()}, n);
}

// A 1x3 and a 3x1 convolution of `from`, concatenated (module E's split branches).
Blueprint::Ref split_3x3(Blueprint& m, Blueprint::Ref from, const std::string& a, const std::string& b,
                         const std::string& joined) {
  m.from(from);
  basic_conv(m, a, 384, 1, 3, 1, 0, 1);
  const Blueprint::Ref left = m.last();
  m.from(from);
  basic_conv(m, b, 384, 3, 1, 1, 1, 0);
  m.concat({left, m.last()}, joined);
  return m.last();
}

void inception_e(Blueprint& m, const std::string& n) {
  const Blueprint::Ref x = m.last();
  square_conv(m, n + ".branch1x1", 320, 1);
  const Blueprint::Ref b1 = m.last();
  m.from(x);
  square_conv(m, n + ".branch3x3_1", 384, 1);
  const Blueprint::Ref b3 =
      split_3x3(m, m.last(), n + ".branch3x3_2a", n + ".branch3x3_2b", n + ".branch3x3");
  m.from(x);
  square_conv(m, n + ".branch3x3dbl_1", 448, 1);
  square_conv(m, n + ".branch3x3dbl_2", 384, 3, 1, 1);
  const Blueprint::Ref bd =
      split_3x3(m, m.last(), n + ".branch3x3dbl_3a", n + ".branch3x3dbl_3b", n + ".branch3x3dbl");
  const Blueprint::Ref bp = pool_branch(m, x, n + ".branch_pool", 192);
  m.concat({b1, b3, bd, bp}, n);
}

Blueprint inception_v3(int num_classes) {
  Blueprint m("inception_v3");
  m.input(299, 299, 3);
  square_conv(m, "Conv2d_1a_3x3", 32, 3, 2);
  square_conv(m, "Conv2d_2a_3x3", 32, 3);
  square_conv(m, "Conv2d_2b_3x3", 64, 3, 1, 1);
  m.maxpool(3, 2, 0, "maxpool1");
  square_conv(m, "Conv2d_3b_1x1", 80, 1);
  square_conv(m, "Conv2d_4a_3x3", 192, 3);
  m.maxpool(3, 2, 0, "maxpool2");
  inception_a(m, "Mixed_5b", 32);
  inception_a(m, "Mixed_5c", 64);
  inception_a(m, "Mixed_5d", 64);
  inception_b(m, "Mixed_6a");
  inception_c(m, "Mixed_6b", 128);
  inception_c(m, "Mixed_6c", 160);
  inception_c(m, "Mixed_6d", 160);
  inception_c(m, "Mixed_6e", 192);
  inception_d(m, "Mixed_7a");
  inception_e(m, "Mixed_7b");
  inception_e(m, "Mixed_7c");
  m.global_avgpool("avgpool").dropout(0.5, "dropout");
  // The classifier's bias keeps nn.Linear's default (torchvision initializes only the weight).
  m.fc(LinearAttrs{.out_features = num_classes, .init = kInit, .bias_init = BiasInit::TorchDefault}, "fc");
  return m;
}

}  // namespace

extern const ZooFamily kInceptionModels{"inception", {{"inception_v3", inception_v3, 1000}}};

}  // namespace kiln

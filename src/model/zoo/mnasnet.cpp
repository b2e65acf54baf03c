// torchvision's MNASNet B1 (torchvision.models.mnasnet; Tan et al., "MnasNet: Platform-Aware
// Neural Architecture Search for Mobile", 2019): a stem of a 3x3 convolution and a depthwise
// separable one, six stacks of inverted residual blocks (1x1 expansion, 3x3 or 5x5 depthwise, linear
// 1x1 projection, ReLU after the first two) and a 1x1 head to 1280 channels; the depth multiplier
// alpha scales every width but the head's. All of it one `layers` Sequential, as torchvision's
// (version 2: the stem scales with alpha too).
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>

#include "kiln/error.h"
#include "model/zoo_family.h"

namespace kiln {
namespace {

// torchvision's _BN_MOMENTUM: the paper's TensorFlow decay 0.9997 as PyTorch's momentum. Python's
// 1 - 0.9997 is 0.00029999999999996696; kiln holds the decimal 0.0003, what an ONNX export of the
// model imports as (its float32 0.9997 names no finer value), 1.1e-13 relatively apart: the running
// statistics move by as much, far below float64 equivalence bounds (1e-9).
constexpr double kBnMomentum = 0.0003;
constexpr double kBnEps = 1e-5;

// torchvision's _round_to_multiple_of(val, 8): the nearest multiple of 8 (at least 8), one
// multiple up where that lost more than 10% of val. Python's int() truncates, as the cast does.
int round_to_multiple_of_8(double val) {
  constexpr int kDivisor = 8;
  const int rounded = std::max(kDivisor, int(val + kDivisor / 2.0) / kDivisor * kDivisor);
  return rounded >= 0.9 * val ? rounded : rounded + kDivisor;
}

// torchvision's _get_depths: the stem's two widths and the six stacks' widths, scaled by alpha.
struct Depths {
  int stem, separable, stacks[6];
};

Depths depths(const std::string& model, double alpha) {
  if (!(alpha > 0))
    fail("mnasnet '{}': depth multiplier {} must be > 0 (torchvision's alpha, e.g. 1.0)", model, alpha);
  const int base[8] = {32, 16, 24, 40, 80, 96, 192, 320};
  int scaled[8];
  for (int i = 0; i < 8; ++i) scaled[i] = round_to_multiple_of_8(base[i] * alpha);
  return {scaled[0], scaled[1], {scaled[2], scaled[3], scaled[4], scaled[5], scaled[6], scaled[7]}};
}

// A bias-free convolution (kiln's default init: kaiming_normal_, fan_out, ReLU's gain, as
// torchvision's) with the size-keeping padding, then BatchNorm with MNASNet's momentum.
void conv_bn(Blueprint& m, const std::string& conv_name, const std::string& bn_name, int out_channels, int kernel,
             int stride, int groups = 1) {
  ConvAttrs conv = ConvAttrs::square(out_channels, kernel, stride, kernel / 2);
  conv.groups = groups;
  m.conv(conv, conv_name).bn(bn_name, kBnEps, kBnMomentum);
}

// torchvision's _InvertedResidual at `name`: its `layers` Sequential (0-2: 1x1 expansion, BN, ReLU;
// 3-5: depthwise, BN, ReLU; 6-7: 1x1 projection, BN), the input added back where the block keeps the
// channels and the size.
void inverted_residual(Blueprint& m, const std::string& name, int in_channels, int out_channels, int kernel,
                       int stride, int expansion) {
  const int mid = in_channels * expansion;
  Blueprint body("layers");
  conv_bn(body, "layers.0", "layers.1", mid, 1, 1);
  body.relu("layers.2");
  conv_bn(body, "layers.3", "layers.4", mid, kernel, stride, mid);
  body.relu("layers.5");
  conv_bn(body, "layers.6", "layers.7", out_channels, 1, 1);
  if (in_channels == out_channels && stride == 1) {
    m.residual(body, std::nullopt, /*relu_after=*/false, name);
  } else {
    m.seq(body, name);
  }
}

Blueprint mnasnet(const std::string& name, double alpha, int num_classes) {
  const Depths d = depths(name, alpha);
  Blueprint m(name);
  m.input(224, 224, 3);
  // The stem: a strided 3x3 convolution, then a depthwise separable one with no residual.
  conv_bn(m, "layers.0", "layers.1", d.stem, 3, 2);
  m.relu("layers.2");
  conv_bn(m, "layers.3", "layers.4", d.stem, 3, 1, d.stem);
  m.relu("layers.5");
  conv_bn(m, "layers.6", "layers.7", d.separable, 1, 1);
  // torchvision's _stack()s at layers.8 to layers.13: kernel, first stride, expansion, blocks; the
  // first block of a stack changes the width (and strides), the rest add their input back.
  struct Stack {
    int kernel, stride, expansion, repeats;
  };
  const Stack stacks[6] = {{3, 2, 3, 3}, {5, 2, 3, 3}, {5, 2, 6, 3}, {3, 1, 6, 2}, {5, 2, 6, 4}, {3, 1, 6, 1}};
  int channels = d.separable;
  for (int s = 0; s < 6; ++s) {
    for (int b = 0; b < stacks[s].repeats; ++b) {
      inverted_residual(m, fmt::format("layers.{}.{}", 8 + s, b), channels, d.stacks[s], stacks[s].kernel,
                        b == 0 ? stacks[s].stride : 1, stacks[s].expansion);
      channels = d.stacks[s];
    }
  }
  conv_bn(m, "layers.14", "layers.15", 1280, 1, 1);
  m.relu("layers.16");
  // torchvision's forward: x.mean([2, 3]), then the classifier: Dropout(0.2) and a linear layer
  // from kaiming_uniform_(mode="fan_out", nonlinearity="sigmoid"), U(±sqrt(3 / fan_out)), bias 0.
  m.global_avgpool("mean").dropout(0.2, "classifier.0");
  LinearAttrs classifier{.out_features = num_classes, .bias = true};
  classifier.init = WeightInit::scaled(WeightInit::Draw::Uniform, WeightInit::Fan::Out, 1.7320508075688772);
  classifier.bias_init = BiasInit::Zeros;
  m.fc(classifier, "classifier.1");
  return m;
}

}  // namespace

extern const ZooFamily kMnasnetModels{
    "mnasnet",
    {
        {"mnasnet0_5", [](int n) { return mnasnet("mnasnet0_5", 0.5, n); }, 1000},
        {"mnasnet0_75", [](int n) { return mnasnet("mnasnet0_75", 0.75, n); }, 1000},
        {"mnasnet1_0", [](int n) { return mnasnet("mnasnet1_0", 1.0, n); }, 1000},
        {"mnasnet1_3", [](int n) { return mnasnet("mnasnet1_3", 1.3, n); }, 1000},
    }};

}  // namespace kiln

// Every model of the zoo that torchvision has is torchvision's network: the parameters and
// multiply-adds kiln's own compiled program counts (kiln::count_model) equal the numbers
// torchvision publishes for the model (its weights' meta: num_params, and GFLOPS, which counts
// multiply-adds of one image at the model's input size, 224x224 but where a row says otherwise, to
// two decimals).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "kiln/compile.h"
#include "kiln/zoo.h"

namespace kiln {
namespace {

struct Published {
  const char* name;
  int64_t parameters;
  double gmacs;  // torchvision's "GFLOPS", rounded to two decimals (mnasnet0_75: its meta's three)
  // torchvision's VGG-BN convolutions carry a bias that BatchNorm cancels; kiln's CBR layers
  // leave it out (src/model/zoo/vgg.cpp), so kiln counts the channels of those convolutions fewer.
  bool conv_bias_before_bn = false;
  // Parameters torchvision's count holds in an auxiliary classifier kiln's zoo leaves out, as
  // torchvision builds the model for fine-tuning (aux_logits=False).
  int64_t auxiliary_parameters = 0;
  // How far the published multiply-adds may lie from kiln's beyond their rounding (see
  // convnext_base's row).
  double gmacs_slack = 0;
};

// inception_v3's AuxLogits: conv0 (768 -> 128, 1x1, with BatchNorm: 98,304 + 256), conv1 (128 ->
// 768, 5x5: 2,457,600 + 1,536) and fc (768 -> 1000: 768,000 + 1,000). torchvision publishes
// 27,161,264 with them (its GoogLeNet's 6,624,904 are without its two).
constexpr int64_t kInceptionAux = 98'560 + 2'459'136 + 769'000;

const Published kTorchvision[] = {
    {"resnet18", 11689512, 1.81},          {"resnet34", 21797672, 3.66},
    {"resnet50", 25557032, 4.09},          {"resnet101", 44549160, 7.80},
    {"resnet152", 60192808, 11.51},        {"resnext50_32x4d", 25028904, 4.23},
    {"resnext101_32x8d", 88791336, 16.41}, {"resnext101_64x4d", 83455272, 15.46},
    {"wide_resnet50_2", 68883240, 11.40},  {"wide_resnet101_2", 126886696, 22.75},
    {"vgg11", 132863336, 7.61},            {"vgg11_bn", 132868840, 7.61, true},
    {"vgg13", 133047848, 11.31},           {"vgg13_bn", 133053736, 11.31, true},
    {"vgg16", 138357544, 15.47},           {"vgg16_bn", 138365992, 15.47, true},
    {"vgg19", 143667240, 19.63},           {"vgg19_bn", 143678248, 19.63, true},
    {"mobilenet_v2", 3504872, 0.30},       {"alexnet", 61100840, 0.71},
    {"regnet_x_400mf", 5495976, 0.41},     {"regnet_x_800mf", 7259656, 0.80},
    {"regnet_x_1_6gf", 9190136, 1.60},     {"regnet_x_3_2gf", 15296552, 3.18},
    {"regnet_x_8gf", 39572648, 8.00},      {"regnet_x_16gf", 54278536, 15.94},
    {"regnet_x_32gf", 107811560, 31.74},   {"densenet121", 7978856, 2.83},
    {"densenet161", 28681000, 7.73},       {"densenet169", 14149480, 3.36},
    {"densenet201", 20013928, 4.29},       {"mnasnet0_5", 2218512, 0.10},
    // torchvision's weights' meta holds 0.215 (its "_ops"), which its docs print as 0.21 (Python
    // rounds the float 0.215, just below the half, down); kiln counts 0.21549.
    {"mnasnet0_75", 3170208, 0.215},       {"mnasnet1_0", 4383312, 0.31},
    {"mnasnet1_3", 6282256, 0.53},
    {"regnet_y_400mf", 4344144, 0.40},     {"regnet_y_800mf", 6432512, 0.83},
    {"regnet_y_1_6gf", 11202430, 1.61},    {"regnet_y_3_2gf", 19436338, 3.18},
    {"regnet_y_8gf", 39381472, 8.47},      {"regnet_y_16gf", 83590140, 15.91},
    {"regnet_y_32gf", 145046770, 32.28},   {"mobilenet_v3_large", 5483032, 0.22},
    {"mobilenet_v3_small", 2542856, 0.06}, {"efficientnet_b0", 5288548, 0.39},
    // EfficientNet B1-B4 at their weights' crops (240, 288, 300, 380), where torchvision counts them.
    {"efficientnet_b1", 7794184, 0.69},    {"efficientnet_b2", 9109994, 1.09},
    {"efficientnet_b3", 12233232, 1.83},   {"efficientnet_b4", 19341616, 4.39},
    // EfficientNet V2 at its weights' crops: S at 384, M at 480.
    {"efficientnet_v2_s", 21458488, 8.37}, {"efficientnet_v2_m", 54139356, 24.58},
    {"convnext_tiny", 28589128, 4.46},     {"convnext_small", 50223688, 8.68},
    // convnext_base: torchvision publishes 15.36, kiln counts 15.3547 (the convolutions and linear
    // layers by hand: 15.3548), 0.0003 short of rounding to it, while tiny, small and large, counted
    // the same way, round to theirs, and its parameters equal torchvision's to the unit. A missing
    // block (0.416 G) or a wrong width (128 -> 120: -1.0 G) still lands far past the slack.
    {"convnext_base", 88591464, 15.36, false, 0, 0.001},
    {"convnext_large", 197767336, 34.36},
    {"shufflenet_v2_x0_5", 1366792, 0.04}, {"shufflenet_v2_x1_0", 2278604, 0.14},
    {"shufflenet_v2_x1_5", 3503624, 0.30}, {"shufflenet_v2_x2_0", 7393996, 0.58},
    {"squeezenet1_0", 1248424, 0.82},      {"squeezenet1_1", 1235496, 0.35},
    {"googlenet", 6624904, 1.50},
    {"inception_v3", 27161264, 5.71, false, kInceptionAux},  // at 299x299
};

// The output channels of the program's convolutions fused with a BatchNorm: the biases torchvision's
// VGG-BN has and kiln's does not.
int64_t fused_conv_channels(const Program& p) {
  int64_t channels = 0;
  for (const Layer& l : p.graph.layers)
    if (l.kind == LayerKind::CBR) channels += attrs_of<ConvAttrs>(l).out_channels;
  return channels;
}

class ZooCounts : public ::testing::TestWithParam<Published> {};

TEST_P(ZooCounts, ParametersAndMultiplyAddsAreTorchvisions) {
  const Published& want = GetParam();
  CompileOptions o;
  o.batch = 1;
  const Program p = compile(zoo::by_name(want.name), o);
  const ModelCounts counts = count_model(p);
  const int64_t omitted = want.conv_bias_before_bn ? fused_conv_channels(p) : 0;
  EXPECT_EQ(counts.parameters + omitted + want.auxiliary_parameters, want.parameters);
  // Two decimals of a billion: within half a unit of the last published digit.
  EXPECT_NEAR(double(counts.multiply_adds) / 1e9, want.gmacs, 0.005 + 1e-9 + want.gmacs_slack);
}

INSTANTIATE_TEST_SUITE_P(Torchvision, ZooCounts, ::testing::ValuesIn(kTorchvision),
                         [](const auto& info) { return std::string(info.param.name); });

// The counts follow the program, not a table: 10 classes instead of 1000 take the head's
// 2048 x 990 weights and 990 biases away, and as many multiply-adds.
TEST(ZooCounts, FollowTheCompiledProgram) {
  CompileOptions o;
  o.batch = 1;
  const ModelCounts imagenet = count_model(compile(zoo::by_name("resnet50"), o));
  const ModelCounts ten = count_model(compile(zoo::by_name("resnet50", 10), o));
  EXPECT_EQ(imagenet.parameters - ten.parameters, 2048 * 990 + 990);
  EXPECT_EQ(imagenet.multiply_adds - ten.multiply_adds, 2048 * 990);
}

// Every zoo model torchvision has is held to its numbers above; a model added to the zoo under a
// torchvision name without a row here fails.
TEST(ZooCounts, EveryTorchvisionModelOfTheZooIsChecked) {
  const std::set<std::string> kilns_own = {"digits_cnn", "resnet18_cifar", "resnet50_cifar", "vgg16_bn_cifar"};
  std::set<std::string> checked;
  for (const Published& p : kTorchvision) checked.insert(p.name);
  for (const std::string& name : zoo::names()) {
    if (!kilns_own.count(name)) {
      EXPECT_TRUE(checked.count(name)) << name << " has no torchvision numbers here";
    }
  }
}

}  // namespace
}  // namespace kiln

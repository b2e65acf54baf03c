// export_torch_weights is the inverse of load_torch_weights: every zoo model's random weights and
// BatchNorm statistics, written as PyTorch's state_dict and loaded into a fresh executable, give
// bit-identical logits; the file holds torchvision's names, OIHW filters and a flattened map's linear
// columns in C,H,W order, value for value.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "kiln/checkpoint.h"
#include "kiln/compile.h"
#include "kiln/export.h"
#include "kiln/torch_weights.h"
#include "kiln/zoo.h"
#include "onnx_runner.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

std::vector<float> floats(const NamedTensor& t) {
  std::vector<float> v(t.data.size() / 4);
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

class ZooTorchExport : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooTorchExport, LoadingTheExportBackGivesTheSameLogits) {
  const Blueprint bp = zoo::by_name(GetParam(), 10);
  const CompileOptions o = testing::zoo_test_options(bp);
  const int side = o.input_hwc[0];
  Executable trained(compile(bp, o), 3);
  testing::randomize_batch_norms(trained, 4);
  const Shape shape = {2, o.input_hwc[2], side, side};
  const std::vector<float> x = testing::normal_floats(size_t(numel(shape)), 5);
  const std::vector<float> want = testing::kiln_logits(trained, x, shape);

  testing::TempDir dir;
  const std::string file = dir.file("weights.safetensors");
  TorchExportOptions options;
  // torchvision's VGG-BN convolutions have a bias before their BatchNorm: one zero bias for each of
  // kiln's CBR layers.
  const bool vgg_bn = GetParam().rfind("vgg", 0) == 0 && GetParam().find("_bn") != std::string::npos;
  options.conv_bias_before_bn = vgg_bn;
  const TorchExportSummary s = export_torch_weights(trained, file, options);
  const std::map<std::string, std::string> names = torch_names(trained.program());
  const size_t zero_biases = vgg_bn ? size_t(trained.program().graph.count(LayerKind::CBR)) : 0;
  if (GetParam() == "vgg16_bn") {
    EXPECT_EQ(zero_biases, 13u);
  }
  EXPECT_EQ(size_t(s.tensors), names.size() + zero_biases);

  Executable fresh(compile(bp, o), 99);  // other weights until the file is loaded
  ASSERT_NE(testing::kiln_logits(fresh, x, shape), want);
  const TorchWeightsLoaded loaded = load_torch_weights(fresh, file);
  EXPECT_EQ(size_t(loaded.tensors), names.size());
  const std::vector<float> got = testing::kiln_logits(fresh, x, shape);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "not bit-identical";
}

INSTANTIATE_TEST_SUITE_P(EveryZooModel, ZooTorchExport, ::testing::ValuesIn(zoo::names()),
                         [](const auto& info) { return info.param; });

TEST(TorchExport, TorchvisionNamesAndLayoutsValueForValue) {
  testing::TempDir dir;
  CompileOptions o;
  o.batch = 1;
  o.input_hwc = {64, 64, 3};
  Executable resnet(compile(zoo::resnet18(10), o), 1);
  const std::string file = dir.file("resnet18.safetensors");
  TorchExportOptions options;
  options.info.model = "resnet18";
  export_torch_weights(resnet, file, options);
  const SafetensorsFile saved = load_safetensors(file);
  const std::map<std::string, Shape> expected = {
      {"conv1.weight", {64, 3, 7, 7}},       {"bn1.running_var", {64}}, {"layer1.0.conv1.weight", {64, 64, 3, 3}},
      {"layer2.0.downsample.0.weight", {128, 64, 1, 1}}, {"layer2.0.downsample.1.running_mean", {128}},
      {"fc.weight", {10, 512}},             {"fc.bias", {10}}};
  for (const auto& [name, shape] : expected) {
    const NamedTensor* t = saved.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, shape) << name;
    EXPECT_EQ(t->dtype, DType::F32) << name;
  }
  EXPECT_EQ(saved.find("conv1.bias"), nullptr);  // ResNet's convolutions have none
  EXPECT_EQ(saved.metadata.at("model"), "resnet18");
  EXPECT_EQ(saved.metadata.at("format"), "pt");
  // OIHW: PyTorch's [k, c, r, s] is kiln's KRSC [k, r, s, c].
  const std::vector<float> oihw = floats(*saved.find("conv1.weight")), krsc = resnet.read<float>(resnet.id("conv1.conv.weight"));
  for (int64_t k : {0, 17, 63})
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t r : {0, 3, 6})
        for (int64_t q : {1, 5}) EXPECT_EQ(oihw[((k * 3 + c) * 7 + r) * 7 + q], krsc[((k * 7 + r) * 7 + q) * 3 + c]);

  // digits_cnn's fc1 reads the 5x5x64 map: PyTorch's column c*25 + h*5 + w is kiln's (h*5 + w)*64 + c.
  o.input_hwc = {};
  Executable digits(compile(zoo::digits_cnn(), o), 2);
  const std::string digits_file = dir.file("digits.safetensors");
  export_torch_weights(digits, digits_file);
  const std::vector<float> chw = floats(*load_safetensors(digits_file).find("fc1.weight"));
  const std::vector<float> hwc = digits.read<float>(digits.id("fc1.weight"));
  ASSERT_EQ(chw.size(), size_t(128 * 1600));
  for (int64_t row : {0, 77, 127})
    for (int64_t c : {0, 31, 63})
      for (int64_t h : {0, 4})
        for (int64_t w : {1, 3}) EXPECT_EQ(chw[row * 1600 + c * 25 + h * 5 + w], hwc[row * 1600 + (h * 5 + w) * 64 + c]);

  // An existing file is refused and left as it was; overwrite replaces it.
  try {
    export_torch_weights(digits, digits_file);
    ADD_FAILURE() << "an existing file was replaced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TorchExportOptions::overwrite"), std::string::npos) << e.what();
  }
  EXPECT_EQ(load_safetensors(digits_file).tensors.size(), 24u);
  options.overwrite = true;
  EXPECT_EQ(export_torch_weights(resnet, digits_file, options).tensors, 102);  // torchvision: 122, less 20 num_batches_tracked
}

}  // namespace
}  // namespace kiln

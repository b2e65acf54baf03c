// Models that torch.onnx.export wrote train in kiln as the zoo's own: PyTorch
// (bench/torch_onnx_export_reference.py) initializes a torchvision model at random, with BatchNorm
// statistics away from their defaults, exports it as README tells a user to (the TorchScript
// exporter in training mode, or the dynamo exporter without its optimizer: both keep BatchNorm as
// layers), and computes its eval-mode logits for a random batch. kiln imports the file
// (kiln::import_onnx) and
// - gives PyTorch's logits, fp32 on the CPU and on the GPU, within the bound torchvision's weights
//   are held to in the zoo (torchvision_weights_gpu_test.cpp);
// - trains one step equal to the zoo model of the same name loaded with the same weights (float64
//   on the CPU, fp32 on the GPU): the same logits, loss and every parameter's gradient, matched by
//   PyTorch's names.
// The CPU halves run wherever KILN_TORCH_PYTHON (or python3) has torch and torchvision, GPU or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/compile.h"
#include "kiln/onnx_import.h"
#include "kiln/torch_weights.h"
#include "kiln/zoo.h"
#include "support/gpu_test_util.h"
#include "support/imported_model_step.h"
#include "support/zoo_test_side.h"

namespace kiln {
namespace {

using testing::nhwc_of;
using testing::zoo_test_side;

struct ExportCase {
  std::string model;
  std::string exporter;  // torchscript | dynamo
  int side = 0;          // the images' side; 0: zoo_test_side's
};

constexpr int kBatch = 2;

// The logits, float64 step and step gap of tests/support/imported_model_step.h, which the timm
// held-out set shares.
using testing::as_doubles;
using testing::training_step;
using testing::relative_gap;
using testing::Step;
using testing::step_gap;
using testing::StepGap;

std::vector<double> inference_logits(const ImportedModel& m, Device device, const std::vector<float>& nhwc) {
  return testing::inference_logits(m, device, nhwc, kBatch);
}

const std::vector<int32_t> kLabels = {0, 1};

// PyTorch's export of `c` (torch_onnx_export_reference.py: random weights, BatchNorm statistics
// away from their defaults, exported as README says) with its eval logits for `x`, the file
// imported, and the side of the images.
struct Exported {
  int side = 0;
  std::vector<float> nhwc;
  SafetensorsFile torch;
  std::string weights;  // PyTorch's state_dict, for the zoo model
  ImportedModel imported;
};

Exported export_and_import(const ExportCase& c) {
  Exported e;
  e.side = c.side ? c.side : zoo_test_side(zoo::by_name(c.model));
  const Shape nchw = {kBatch, 3, e.side, e.side};
  std::vector<float> x(size_t(numel(nchw)));
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& v : x) v = normal(rng);
  e.nhwc = nhwc_of(x, nchw);
  const auto dir = std::filesystem::temp_directory_path() / "kiln_torch_onnx";
  std::filesystem::create_directories(dir);
  const std::string stem = c.model + "." + c.exporter + "." + std::to_string(e.side);
  const std::string onnx = (dir / (stem + ".onnx")).string();
  e.weights = (dir / (stem + ".safetensors")).string();
  e.torch = gpu_test::torch_reference(
      "torch_onnx_export_reference.py", "kiln_torch_onnx", stem, {gpu_test::f32_tensor("x", x, nchw)},
      {{"model", c.model}, {"seed", "5"}, {"exporter", c.exporter}, {"onnx", onnx}, {"weights", e.weights}});
  e.imported = import_onnx(onnx);
  return e;
}

// One training step (no update) of the zoo model loaded with PyTorch's weights, and of the imported
// model, compiled for `device` and `precision` at the images' side (the zoo model's own size may be
// larger).
CompileOptions step_options(const Exported& e, Device device, Precision precision) {
  CompileOptions o;
  o.device = device, o.precision = precision, o.batch = kBatch;
  o.input_hwc = {e.side, e.side, 3};
  return o;
}

Step zoo_step(const std::string& model, const Exported& e, Device device = Device::CPU,
              Precision precision = Precision::FP64) {
  Executable exe(compile(zoo::by_name(model), step_options(e, device, precision)), 1);
  load_torch_weights(exe, e.weights);
  return training_step(exe, e.nhwc, kLabels);
}

Step imported_step(const Exported& e, Device device = Device::CPU, Precision precision = Precision::FP64) {
  Executable exe(compile(e.imported.blueprint, step_options(e, device, precision)), 1);
  load_imported_weights(exe, e.imported);
  return training_step(exe, e.nhwc, kLabels);
}

std::pair<Step, Step> zoo_and_imported_steps(const std::string& model, const Exported& e) {
  return {zoo_step(model, e), imported_step(e)};
}

// fp32 through tens of layers in other summation orders: the zoo's bound
// (torchvision_weights_gpu_test.cpp: 0.2-2.3e-6 measured); a misplaced or missing layer (a
// BatchNorm dropped, a weight transposed) moves the logits by O(1) (TorchOnnxExportBounds).
constexpr double kLogitsBound = 2e-5;
// The imported model's step against the zoo model's, both float64 on the CPU from the same
// weights (the same masks: dropout and stochastic depth draw by layer name, which the import
// takes from PyTorch's modules). The same network compiled from two blueprints; where it has
// stochastic depth the file holds its keep probability as float32(1 - p), so the drop's scale
// differs from the zoo's by up to 2^-24 of it, and the gap grows with the number of such layers
// (measured on the largest gradient: convnext_tiny 7.0e-10, efficientnet_b0 5.0e-7, efficientnet_b1
// 2.0e-6, efficientnet_v2_m 1.5e-6); elsewhere the steps are bit for bit alike (resnet18/50,
// mobilenet_v2/v3, densenet121, googlenet, inception_v3, regnet_y, resnext50, shufflenet,
// squeezenet). A layer of the wrong kind, attribute or weight moves the step by O(1)
// (TorchOnnxExportBounds).
constexpr double kStepBound = 1e-5;

class TorchOnnxExport : public ::testing::TestWithParam<ExportCase> {};

TEST_P(TorchOnnxExport, ImportsToPyTorchsLogitsAndTrainsAsTheZooModel) {
  const ExportCase& c = GetParam();
  if (const std::string why = gpu_test::torch_missing(Device::CPU); !why.empty()) GTEST_SKIP() << why;
  const Exported e = export_and_import(c);
  for (const std::string& note : e.imported.notes)
    std::printf("%s (%s): note: %s\n", c.model.c_str(), c.exporter.c_str(), note.c_str());
  const double cpu = relative_gap(inference_logits(e.imported, Device::CPU, e.nhwc),
                                  as_doubles(gpu_test::f32_values(e.torch, "logits")));
  std::printf("%s (%s, %dx%d): imported logits vs PyTorch's, largest gap / largest logit: CPU %.2e\n",
              c.model.c_str(), c.exporter.c_str(), e.side, e.side, cpu);
  EXPECT_LT(cpu, kLogitsBound);

  const auto [want, got] = zoo_and_imported_steps(c.model, e);
  const StepGap gap = step_gap(got, want);
  std::printf("%s (%s): float64 step, imported vs zoo: logits %.2e, loss %.2e, worst gradient %.2e of the largest (%s)\n",
              c.model.c_str(), c.exporter.c_str(), gap.logits, gap.loss, gap.worst_gradient, gap.worst_name.c_str());
  EXPECT_LT(gap.logits, kStepBound) << "logits";
  EXPECT_LT(gap.loss, kStepBound) << "loss";
  EXPECT_TRUE(gap.missing.empty()) << "parameters on one side only, e.g. " << gap.missing.front();
  EXPECT_LT(gap.worst_gradient, kStepBound) << "gradient of " << gap.worst_name;
}

// On the GPU: the imported model gives PyTorch's CUDA logits, and its fp32 training step equals the
// zoo model's there. The two blueprints compile to one program, but each compile tunes its own cuDNN
// plans, whose summation orders may differ; two such runs of one network lie no farther apart than
// fp32 lies from float64, so the bound is twice the zoo model's own gap between its fp32 GPU step and
// its float64 CPU step (and at least 1e-6). A layer of the wrong kind, attribute or weight moves the
// step by O(1) (TorchOnnxExportBounds).
TEST_P(TorchOnnxExport, GivesPyTorchsGpuLogitsAndTheZooModelsGpuStep) {
  const ExportCase& c = GetParam();
  if (const std::string why = gpu_test::torch_missing(Device::CUDA); !why.empty()) GTEST_SKIP() << why;
  const Exported e = export_and_import(c);
  const double logits = relative_gap(inference_logits(e.imported, Device::CUDA, e.nhwc),
                                     as_doubles(gpu_test::f32_values(e.torch, "logits_cuda")));
  std::printf("%s (%s, %dx%d): imported logits vs PyTorch's on the GPU: %.2e\n", c.model.c_str(),
              c.exporter.c_str(), e.side, e.side, logits);
  EXPECT_LT(logits, kLogitsBound);

  const Step zoo = zoo_step(c.model, e, Device::CUDA, Precision::FP32);
  const StepGap gap = step_gap(imported_step(e, Device::CUDA, Precision::FP32), zoo);
  const StepGap fp32 = step_gap(zoo, zoo_step(c.model, e));
  const auto bound = [](double spread) { return std::max(1e-6, 2 * spread); };
  std::printf("%s (%s): fp32 GPU step, imported vs zoo: logits %.2e, loss %.2e, worst gradient %.2e (%s); "
              "the zoo's fp32 vs float64: %.2e, %.2e, %.2e (%s)\n",
              c.model.c_str(), c.exporter.c_str(), gap.logits, gap.loss, gap.worst_gradient, gap.worst_name.c_str(),
              fp32.logits, fp32.loss, fp32.worst_gradient, fp32.worst_name.c_str());
  EXPECT_TRUE(gap.missing.empty()) << "parameters on one side only, e.g. " << gap.missing.front();
  EXPECT_LE(gap.logits, bound(fp32.logits)) << "logits";
  EXPECT_LE(gap.loss, bound(fp32.loss)) << "loss";
  EXPECT_LE(gap.worst_gradient, bound(fp32.worst_gradient)) << "gradient of " << gap.worst_name;
}

// The bounds catch a wrong import: resnet18's file imported, then one mistake an importer could
// make put into the import by hand. Each moves the logits and the step far past the bounds.
TEST(TorchOnnxExportBounds, AWrongImportIsCaught) {
  if (const std::string why = gpu_test::torch_missing(Device::CPU); !why.empty()) GTEST_SKIP() << why;
  const Exported right = export_and_import({"resnet18", "torchscript"});
  const auto logits_gap = [&](const ImportedModel& m) {
    return relative_gap(inference_logits(m, Device::CPU, right.nhwc), as_doubles(gpu_test::f32_values(right.torch, "logits")));
  };
  const auto step_of = [&](const ImportedModel& m) {
    Exported wrong = right;
    wrong.imported = m;
    const auto [want, got] = zoo_and_imported_steps("resnet18", wrong);
    return step_gap(got, want);
  };
  ASSERT_LT(logits_gap(right.imported), kLogitsBound);

  // A convolution's filter read with its input channels reversed (a layout misread: OIHW as OHWI
  // would scramble it the same way).
  ImportedModel swapped = right.imported;
  NamedTensor* conv = nullptr;
  for (NamedTensor& t : swapped.weights)
    if (t.name == "layer2.0.conv1.weight") conv = &t;
  ASSERT_NE(conv, nullptr);
  ASSERT_EQ(conv->dtype, DType::F32);
  testing::reverse_input_channels(*conv);
  const double swapped_logits = logits_gap(swapped);
  const StepGap swapped_step = step_of(swapped);

  // The classifier's (out, in) weight filled from the (in, out) matrix a MatMul stores, not
  // transposed (the importer's note for MatMul heads).
  ImportedModel untransposed = right.imported;
  NamedTensor* fc = nullptr;
  for (NamedTensor& t : untransposed.weights)
    if (t.name == "fc.weight") fc = &t;
  ASSERT_NE(fc, nullptr);
  const int64_t out = fc->shape[0], in = fc->shape[1];
  std::vector<float> m(size_t(out * in)), t(m.size());
  std::memcpy(m.data(), fc->data.data(), fc->data.size());
  for (int64_t r = 0; r < out; ++r)
    for (int64_t col = 0; col < in; ++col) t[size_t(col * out + r)] = m[size_t(r * in + col)];
  std::memcpy(fc->data.data(), t.data(), fc->data.size());
  const double fc_logits = logits_gap(untransposed);
  const StepGap fc_step = step_of(untransposed);

  std::printf("reversed filter: logits %.2e, step gradient %.2e; untransposed fc: logits %.2e, step gradient %.2e\n",
              swapped_logits, swapped_step.worst_gradient, fc_logits, fc_step.worst_gradient);
  EXPECT_GT(swapped_logits, 100 * kLogitsBound);
  EXPECT_GT(swapped_step.worst_gradient, 100 * kStepBound);
  EXPECT_GT(fc_logits, 100 * kLogitsBound);
  EXPECT_GT(fc_step.worst_gradient, 100 * kStepBound);
}

// The side PyTorch's exporters need: AlexNet's and VGG's adaptive pooling to 6x6 and 7x7 exports
// only from a map that is a multiple of it (the TorchScript exporter refuses it otherwise; the dynamo
// exporter writes gathers kiln refuses, saying to export at 224x224), so those run at their own 224;
// 0 (zoo_test_side's) for the rest.
int export_side(const std::string& model) {
  return model.starts_with("alexnet") || model.starts_with("vgg") ? 224 : 0;
}

// Every zoo model torchvision has through the TorchScript exporter; one of each family through the
// dynamo exporter (its export takes 10-30 s a model).
std::vector<ExportCase> cases() {
  std::vector<ExportCase> out;
  for (const std::string& name : zoo::names())
    if (name != "digits_cnn" && name.find("_cifar") == std::string::npos) out.push_back({name, "torchscript", export_side(name)});
  for (const char* name : {"resnet50", "resnext50_32x4d", "vgg11_bn", "mobilenet_v2", "mobilenet_v3_small",
                           "efficientnet_b0", "efficientnet_v2_s", "regnet_y_400mf", "mnasnet0_5", "densenet121",
                           "googlenet", "inception_v3", "squeezenet1_1", "shufflenet_v2_x0_5", "convnext_tiny"})
    out.push_back({name, "dynamo", export_side(name)});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, TorchOnnxExport, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.model + "_" + info.param.exporter; });

}  // namespace
}  // namespace kiln

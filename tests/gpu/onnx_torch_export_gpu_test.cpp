// Models that torch.onnx.export wrote train in kiln as the zoo's own: PyTorch
// (bench/torch_onnx_export_reference.py) initializes a torchvision model at random, with BatchNorm
// statistics away from their defaults, exports it as README tells a user to (the TorchScript
// exporter in training mode, or the dynamo exporter without its optimizer: both keep BatchNorm as
// layers), and computes its eval-mode logits for a random batch. kiln imports the file
// (kiln::import_onnx) and
// - gives PyTorch's logits, fp32 on the CPU and on the GPU, within the bound torchvision's weights
//   are held to in the zoo (torchvision_weights_gpu_test.cpp);
// - trains one step (float64, CPU) equal to the zoo model of the same name loaded with the same
//   weights: the same logits, loss and every parameter's gradient, matched by PyTorch's names.
// The CPU halves run wherever KILN_TORCH_PYTHON (or python3) has torch and torchvision, GPU or not.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/onnx_import.h"
#include "kiln/torch_weights.h"
#include "kiln/zoo.h"
#include "support/gpu_test_util.h"
#include "support/zoo_test_side.h"

namespace kiln {
namespace {

using testing::nhwc_of;
using testing::zoo_test_side;

struct ExportCase {
  std::string model;
  std::string exporter;  // torchscript | dynamo
};

constexpr int kBatch = 2;

// The largest difference relative to the largest value of `want`.
double relative_gap(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i])), scale = std::max(scale, std::abs(want[i]));
  return got.size() == want.size() && scale > 0 ? worst / scale : 1e9;
}

std::vector<double> as_doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }

std::vector<double> inference_logits(const ImportedModel& m, Device device, const std::vector<float>& nhwc) {
  CompileOptions o;
  o.device = device, o.batch = kBatch;
  Executable exe(compile(m.blueprint, o), 1);
  load_imported_weights(exe, m);
  exe.write(exe.program().input, nhwc.data(), nhwc.size() * sizeof(float));
  exe.run_inference({});
  return as_doubles(exe.read<float>(exe.program().inference_logits));
}

// One float64 training step of `exe` (weights loaded) on `nhwc` with labels 0, 1: its logits and
// loss, and each trainable parameter's gradient by its PyTorch name.
struct Step {
  std::vector<double> logits;
  double loss = 0;
  std::map<std::string, std::vector<double>> grads;
};

Step float64_step(Executable& exe, const std::vector<float>& nhwc) {
  const Program& p = exe.program();
  const std::vector<double> batch(nhwc.begin(), nhwc.end());  // float64 programs read float64 batches
  exe.write(p.input, batch.data(), batch.size() * sizeof(double));
  const std::vector<int32_t> labels = {0, 1};
  exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
  exe.run_forward({0.f, 0, 1});
  exe.run_backward({0.f, 0, 1});
  Step s;
  s.logits = exe.read<double>(p.logits);
  s.loss = exe.read<double>(p.loss).at(0);
  const std::map<std::string, std::string> names = torch_names(p);
  for (const auto& param : p.params) {
    const std::string& kiln_name = p.tensors[size_t(param)].name;
    const auto it = names.find(kiln_name);
    s.grads[it == names.end() ? kiln_name : it->second] = exe.gradient(kiln_name);
  }
  return s;
}

class TorchOnnxExport : public ::testing::TestWithParam<ExportCase> {};

TEST_P(TorchOnnxExport, ImportsToPyTorchsLogitsAndTrainsAsTheZooModel) {
  const ExportCase& c = GetParam();
  if (const std::string why = gpu_test::torch_missing(Device::CPU); !why.empty()) GTEST_SKIP() << why;
  const Blueprint zoo_model = zoo::by_name(c.model);
  const int side = zoo_test_side(zoo_model);
  const Shape nchw = {kBatch, 3, side, side};
  std::vector<float> x(size_t(numel(nchw)));
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& v : x) v = normal(rng);
  const std::vector<float> nhwc = nhwc_of(x, nchw);

  const auto dir = std::filesystem::temp_directory_path() / "kiln_torch_onnx";
  std::filesystem::create_directories(dir);
  const std::string stem = c.model + "." + c.exporter;
  const std::string onnx = (dir / (stem + ".onnx")).string(), weights = (dir / (stem + ".safetensors")).string();
  const SafetensorsFile torch = gpu_test::torch_reference(
      "torch_onnx_export_reference.py", "kiln_torch_onnx", stem, {gpu_test::f32_tensor("x", x, nchw)},
      {{"model", c.model}, {"seed", "5"}, {"exporter", c.exporter}, {"onnx", onnx}, {"weights", weights}});

  const ImportedModel m = import_onnx(onnx);
  for (const std::string& note : m.notes) std::printf("%s (%s): note: %s\n", c.model.c_str(), c.exporter.c_str(), note.c_str());
  // fp32 through tens of layers in other summation orders: the zoo's bound
  // (torchvision_weights_gpu_test.cpp: 0.2-2.3e-6 measured); a misplaced or missing layer (a
  // BatchNorm dropped, a weight transposed) moves the logits by O(1).
  const double cpu = relative_gap(inference_logits(m, Device::CPU, nhwc), as_doubles(gpu_test::f32_values(torch, "logits")));
  std::printf("%s (%s): imported logits vs PyTorch's, largest gap / largest logit: CPU %.2e\n", c.model.c_str(),
              c.exporter.c_str(), cpu);
  EXPECT_LT(cpu, 2e-5);
  if (gpu_test::torch_missing(Device::CUDA).empty()) {
    const double gpu = relative_gap(inference_logits(m, Device::CUDA, nhwc),
                                    as_doubles(gpu_test::f32_values(torch, "logits_cuda")));
    std::printf("%s (%s): GPU %.2e\n", c.model.c_str(), c.exporter.c_str(), gpu);
    EXPECT_LT(gpu, 2e-5);
  }

  // The imported model's step against the zoo model's, both float64 on the CPU from the same
  // weights (the same masks: dropout and stochastic depth draw by layer name, which the import
  // takes from PyTorch's modules). The same network compiled from two blueprints; where it has
  // stochastic depth the file holds its keep probability as float32(1 - p), so the drop's scale
  // differs from the zoo's by up to 2^-24 of it, and the gap grows with the number of such layers
  // (measured on the largest gradient: convnext_tiny 7.0e-10, efficientnet_b0 5.0e-7, efficientnet_b1
  // 2.0e-6, efficientnet_v2_m 1.5e-6); elsewhere the steps are bit for bit alike (resnet18/50,
  // mobilenet_v2/v3, densenet121, googlenet, inception_v3, regnet_y, resnext50, shufflenet,
  // squeezenet). A layer of the wrong kind, attribute or weight moves the step by O(1). Gradients
  // are measured against the largest of all: a BatchNorm bias whose shift the next BatchNorm takes
  // away has gradients of rounding size only (efficientnet_b0's features.6.1.block.3.1.bias).
  CompileOptions o;
  o.batch = kBatch, o.precision = Precision::FP64;
  o.input_hwc = {side, side, 3};  // the zoo model's own size may be larger
  Executable zoo_exe(compile(zoo_model, o), 1), imported_exe(compile(m.blueprint, o), 1);
  load_torch_weights(zoo_exe, weights);
  load_imported_weights(imported_exe, m);
  const Step want = float64_step(zoo_exe, nhwc), got = float64_step(imported_exe, nhwc);
  constexpr double kStepBound = 1e-5;
  EXPECT_LT(relative_gap(got.logits, want.logits), kStepBound) << "logits";
  EXPECT_NEAR(got.loss, want.loss, kStepBound * std::abs(want.loss)) << "loss";
  EXPECT_EQ(got.grads.size(), want.grads.size()) << "trainable parameters";
  double worst = 0, largest = 0;
  std::string worst_name;
  for (const auto& [name, g] : want.grads)
    for (double v : g) largest = std::max(largest, std::abs(v));
  for (const auto& [name, g] : want.grads) {
    const auto it = got.grads.find(name);
    if (it == got.grads.end() || it->second.size() != g.size()) {
      ADD_FAILURE() << "the imported model has no parameter " << name << " of " << g.size() << " values";
      continue;
    }
    for (size_t i = 0; i < g.size(); ++i)
      if (std::abs(it->second[i] - g[i]) > worst) worst = std::abs(it->second[i] - g[i]), worst_name = name;
  }
  worst /= std::max(largest, 1e-300);
  std::printf("%s (%s): float64 step, imported vs zoo: logits %.2e, loss %.2e, worst gradient %.2e of the largest (%s)\n",
              c.model.c_str(), c.exporter.c_str(), relative_gap(got.logits, want.logits),
              std::abs(got.loss - want.loss), worst, worst_name.c_str());
  EXPECT_LT(worst, kStepBound) << "gradient of " << worst_name;
}

// Every zoo model torchvision has through the TorchScript exporter; one of each family through the
// dynamo exporter (its export takes 10-30 s a model).
std::vector<ExportCase> cases() {
  std::vector<ExportCase> out;
  for (const std::string& name : zoo::names())
    if (name != "digits_cnn" && name.find("_cifar") == std::string::npos) out.push_back({name, "torchscript"});
  for (const char* name : {"resnet50", "resnext50_32x4d", "vgg11_bn", "mobilenet_v2", "mobilenet_v3_small",
                           "efficientnet_b0", "efficientnet_v2_s", "regnet_y_400mf", "mnasnet0_5", "densenet121",
                           "googlenet", "inception_v3", "squeezenet1_1", "shufflenet_v2_x0_5", "convnext_tiny"})
    out.push_back({name, "dynamo"});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, TorchOnnxExport, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.model + "_" + info.param.exporter; });

}  // namespace
}  // namespace kiln

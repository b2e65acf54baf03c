// The ONNX import's held-out set (issue 50): models the project never names, drawn at random from
// timm, so that the import is measured on files nobody tuned it for. A seed (KILN_TIMM_SEED, else
// the clock; printed, and in every failure message, so a failure repeats) draws 6 models
// (KILN_TIMM_DRAWN: more; KILN_TIMM_MODELS names models instead) from kCandidates, timm models of the families kiln's ONNX vocabulary
// covers (none under the name of a zoo model), and an exporter for each. PyTorch (bench/timm_onnx_export_reference.py) builds the
// model with random weights, random BatchNorm statistics, `kClasses` outputs and no dropout or
// stochastic depth (so no random masks), exports it as README tells a user to (the TorchScript
// exporter in training mode, or the dynamo exporter without its optimizer), and computes its
// eval-mode logits and one float64 training step. kiln imports the file (kiln::import_onnx) and
// - gives timm's eval logits, fp32 on the CPU and on the GPU, within the bound of the torchvision
//   models' export test (onnx_torch_export_gpu_test.cpp);
// - trains one float64 step on the CPU equal to PyTorch's own float64 step of the timm model (there
//   is no zoo model to compare with): the same logits, mean cross-entropy loss and every
//   parameter's gradient, matched by the file's initializer names (the state_dict's).
// TimmOnnxExportBounds shows the bounds catch a wrong import. The CPU halves run wherever
// KILN_TORCH_PYTHON (or python3) has torch, torchvision and timm; they skip, saying so, elsewhere.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/compile.h"
#include "kiln/onnx_import.h"
#include "kiln/safetensors.h"
#include "kiln/torch_weights.h"
#include "kiln/zoo.h"
#include "support/gpu_test_util.h"
#include "support/imported_model_step.h"
#include "support/torch_training_reference.h"
#include "support/zoo_test_side.h"

namespace kiln {
namespace {

using testing::as_doubles;
using testing::Gradients;
using testing::nhwc_of;
using testing::relative_gap;
using testing::Step;
using testing::StepGap;

constexpr int kBatch = 2, kClasses = 10;
// Every candidate takes 64x64 images (ImageNet models, five stride-2 stages: a 2x2 map at the end),
// and the steps stay a few seconds each on the CPU.
constexpr int kSide = 64;
const std::vector<int32_t> kLabels = {3, 7};

// The same bounds as onnx_torch_export_gpu_test.cpp's. Logits: fp32 through tens of layers in
// other summation orders (torchvision's weights in the zoo: 0.2-2.3e-6 measured; here 3.4e-7 to
// 3.4e-6), or 4 times PyTorch's own fp32 spread where that is larger (check_draw); a misplaced or
// missing layer moves them by O(1). Step: both sides float64 from the same weights, epsilons and
// batch, no random masks (no dropout or stochastic depth), so what is left is float64 rounding in
// other summation orders, amplified where a BatchNorm normalizes few values (measured on 59 models:
// 1e-15 to 9e-11 of the largest gradient, up to 8.5e-9 in MobileNetV3, LCNet, VoVNet, GhostNet
// and ReXNet), far under 1e-5; a layer of the wrong kind, attribute or weight moves the step by
// O(1) (TimmOnnxExportBounds). The reference's epsilons are the file's float32 ones: with
// PyTorch's float64 1e-5 rexnet_100's gradients differ by 4.9e-5 (timm_onnx_export_reference.py).
constexpr double kLogitsBound = 2e-5, kStepBound = 1e-5;

// timm 1.0.31's models in the families kiln's ONNX import covers, each imported (kiln plan) from
// its TorchScript export at 64x64 with PyTorch 2.9.1, and from its dynamo export where `dynamo`.
// Left out, for what kiln refuses (its messages): a 1-D convolution and Expand (ecaresnet's ECA),
// Softmax and ReduceSum (resnest, skresnet), Pad by reflection (the blur pools of densenetblur121d and
// efficientnet_blur_b0), a Mul or Add by a constant (timm's ConvNeXt layer scale,
// mobilenetv4_hybrid, mobileone, fastvit, ghostnetv3, nf_ nets), Resize (hrnet, ghostnetv2),
// Transpose (tresnet's space-to-depth, mobilevit, efficientvit), GRN (convnextv2).
struct Candidate {
  const char* name;
  bool dynamo;  // false: only the TorchScript export imports (the reason beside it)
  bool torchscript = true;  // false: only the dynamo export imports (the reason beside it)
};
const std::vector<Candidate> kCandidates = {
    // ResNet, ResNeXt, SE-ResNet(Xt) and their stems (d: deep, t: tiered), ResNet-RS, ResNetV2
    {"resnet10t", true}, {"resnet14t", true}, {"resnet18d", true}, {"resnet26", true}, {"resnet26d", true},
    {"resnet26t", true}, {"resnet34d", true}, {"resnet50d", true}, {"resnet32ts", true}, {"resnext26ts", true},
    {"resnext50d_32x4d", true}, {"seresnet18", true}, {"seresnet33ts", true}, {"seresnext26d_32x4d", true},
    {"legacy_seresnet18", true}, {"resnetrs50", true}, {"resnetv2_18", true},
    // GroupNorm: the dynamo exporter writes it as InstanceNormalization with a Mul by a constant
    {"resnet50_gn", false}, {"resnetv2_50d_gn", false},
    // RegNet X, Y, Z
    {"regnetx_002", true}, {"regnety_002", true}, {"regnetz_005", true}, {"regnetx_004_tv", true},
    {"regnety_008_tv", true},
    // EfficientNet's family (MBConv blocks): EfficientNet-Lite, -EdgeTPU, V2, MobileNet V2/V3/V4,
    // MnasNet, FBNet, SPNASNet, LCNet, HardCoReNAS, TinyNet
    {"efficientnet_lite0", true}, {"efficientnet_es", true}, {"efficientnet_em", true},
    {"efficientnetv2_rw_t", true}, {"efficientnet_b0_gn", false},  // GroupNorm, as above
    {"mobilenetv2_050", true}, {"mobilenetv2_110d", true}, {"mobilenetv3_small_050", true},
    {"mobilenetv3_large_075", true}, {"mobilenetv3_rw", true}, {"mnasnet_050", true}, {"semnasnet_050", true},
    {"fbnetc_100", true}, {"fbnetv3_b", true}, {"spnasnet_100", true}, {"lcnet_050", true}, {"lcnetv2_small", true},
    {"hardcorenas_a", true}, {"tinynet_e", true},
    // torch.export refuses a dynamic batch (a training-mode BatchNorm over a 1x1 map guards N != 1)
    {"mobilenetv4_conv_small", false}, {"selecsls42b", false},
    // Channel concatenation and slicing, and other CNNs
    {"densenet264d", true}, {"dla34", true}, {"dla46_c", true}, {"darknet17", true}, {"repvgg_a0", true},
    {"repghostnet_050", true}, {"xception41", true}, {"ese_vovnet19b_dw", true}, {"vovnet39a", true},
    {"gernet_s", true},
    // x[:, :c] in the dynamo export: a Slice over the batch axis (0 to 2^63-1) kiln refuses
    {"ghostnet_050", false}, {"dpn48b", false}, {"rexnet_100", false}, {"rexnetr_100", false},
    // Channel splits (x.chunk, x.split, torch.split into kernel groups)
    {"res2net50_14w_8s", true}, {"cspresnet50", true}, {"cs3darknet_s", true}, {"mixnet_s", true},
    // TensorFlow's SAME padding (timm's tf_ ports): the TorchScript exporter computes its pads from
    // the input's shape in the graph, which kiln refuses; the dynamo exporter writes them as constants
    {"tf_efficientnet_b0", true, false}, {"tf_efficientnet_lite0", true, false}, {"tf_efficientnetv2_b0", true, false},
    {"tf_mixnet_s", true, false}, {"tf_mobilenetv3_small_minimal_100", true, false},
    {"tf_mobilenetv3_large_075", true, false},
};

// KILN_TIMM_SEED, else drawn from the clock; printed once a process.
uint64_t timm_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("KILN_TIMM_SEED");
    uint64_t s = 0;
    if (env && *env) {
      char* end = nullptr;
      s = std::strtoull(env, &end, 10);
      if (*end) fail("KILN_TIMM_SEED is '{}': give a whole number (a seed a failure printed)", env);
    } else {
      s = uint64_t(std::chrono::system_clock::now().time_since_epoch().count()) % 1000000;
    }
    std::printf("TimmOnnxExport: KILN_TIMM_SEED=%llu draws these models again\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

struct Draw {
  std::string model;
  std::string exporter;  // torchscript | dynamo
};

// KILN_TIMM_MODELS: the models to run instead of a draw, "name[:exporter] ..." (a failure's model
// again, or models not among the candidates); the exporter left out, TorchScript where it imports.
std::vector<Draw> named_models() {
  std::vector<Draw> out;
  const char* env = std::getenv("KILN_TIMM_MODELS");
  std::istringstream words(env ? env : "");
  for (std::string word; words >> word;) {
    Draw d{word.substr(0, word.find(':')), ""};
    if (const size_t colon = word.find(':'); colon != std::string::npos) d.exporter = word.substr(colon + 1);
    if (d.exporter.empty()) {
      const auto c = std::find_if(kCandidates.begin(), kCandidates.end(), [&](const Candidate& k) { return k.name == d.model; });
      d.exporter = c != kCandidates.end() && !c->torchscript ? "dynamo" : "torchscript";
    }
    out.push_back(d);
  }
  return out;
}

// How many models a run draws: 6, or KILN_TIMM_DRAWN (up to all the candidates: a sweep), or those
// KILN_TIMM_MODELS names. Read when the tests are listed, so it names as many test cases.
int draw_count() {
  if (const size_t named = named_models().size()) return int(named);
  const char* env = std::getenv("KILN_TIMM_DRAWN");
  const int n = env && *env ? std::atoi(env) : 6;
  return std::clamp(n, 1, int(kCandidates.size()));
}

// draw_count() candidates without a zoo model's name, in an order and with exporters (either, where
// both import) drawn from `seed` (Fisher-Yates on mt19937_64's own numbers, which the standard
// fixes: the same draw on every machine).
std::vector<Draw> drawn(uint64_t seed) {
  if (std::vector<Draw> named = named_models(); !named.empty()) return named;
  const std::vector<std::string> zoo_names = zoo::names();
  std::vector<Candidate> pool;
  for (const Candidate& c : kCandidates)
    if (std::find(zoo_names.begin(), zoo_names.end(), c.name) == zoo_names.end()) pool.push_back(c);
  std::mt19937_64 rng(seed);
  for (size_t i = pool.size() - 1; i > 0; --i) std::swap(pool[i], pool[size_t(rng() % (i + 1))]);
  std::vector<Draw> out;
  for (size_t i = 0; i < std::min<size_t>(size_t(draw_count()), pool.size()); ++i)
    out.push_back({pool[i].name, pool[i].dynamo && (!pool[i].torchscript || rng() % 2) ? "dynamo" : "torchscript"});
  return out;
}

// Why the comparison cannot run here ("" when it can): torch, torchvision, safetensors and timm.
std::string timm_missing() {
  if (std::string why = gpu_test::torch_missing(Device::CPU); !why.empty()) return why;
  static const bool has_timm =
      std::system((gpu_test::torch_python() + " -c 'import timm, onnx' >/dev/null 2>&1").c_str()) == 0;
  return has_timm ? "" : "needs " + gpu_test::torch_python() + " with timm and onnx (pip install timm onnx onnxscript)";
}

// PyTorch's side of a draw: the batch, the file and the reference's outputs (logits, logits_cuda,
// step_logits, step_loss; the step's gradients in <grads>.safetensors and <grads>.lo.safetensors).
struct TimmReference {
  std::vector<float> nhwc;
  std::string onnx, grads;
  SafetensorsFile torch;
};

TimmReference timm_reference(const Draw& d, uint64_t seed) {
  const Shape nchw = {kBatch, 3, kSide, kSide};
  std::vector<float> x(size_t(numel(nchw)));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& v : x) v = normal(rng);
  TimmReference r;
  r.nhwc = nhwc_of(x, nchw);
  const auto dir = std::filesystem::temp_directory_path() / "kiln_timm_onnx";
  std::filesystem::create_directories(dir);
  const std::string stem = fmt::format("{}.{}.{}", d.model, d.exporter, seed);
  r.onnx = (dir / (stem + ".onnx")).string();
  r.grads = (dir / (stem + ".grads")).string();
  r.torch = gpu_test::torch_reference(
      "timm_onnx_export_reference.py", "kiln_timm_onnx", stem,
      {gpu_test::f32_tensor("x", x, nchw), gpu_test::i32_tensor("labels", kLabels, {kBatch})},
      {{"model", d.model}, {"classes", std::to_string(kClasses)}, {"seed", std::to_string(seed)},
       {"exporter", d.exporter}, {"onnx", r.onnx}, {"grads", r.grads}});
  return r;
}

CompileOptions float64_options() {
  CompileOptions o;
  o.batch = kBatch, o.precision = Precision::FP64;
  return o;
}

// The imported model's float64 step on the CPU.
Step imported_step(const ImportedModel& m, const TimmReference& r) {
  Executable exe(compile(m.blueprint, float64_options()), 1);
  load_imported_weights(exe, m);
  return testing::training_step(exe, r.nhwc, kLabels);
}

// PyTorch's float64 step, its gradients in kiln's layouts: the two float32 halves the script wrote
// load (kiln::load_torch_weights converts PyTorch's layouts) into a program of the imported model
// and add. A gradient of PyTorch's that the program has no parameter for (a parameter the import
// left out as not reaching the loss) is left out of the load and returned in `unplaced`.
struct TorchStep {
  Step step;
  Gradients unplaced;  // PyTorch's layout
};

TorchStep torch_step(const ImportedModel& m, const TimmReference& r) {
  TorchStep out;
  out.step.logits = gpu_test::values(r.torch, "step_logits");
  out.step.loss = gpu_test::values(r.torch, "step_loss").at(0);
  Executable exe(compile(m.blueprint, float64_options()), 1);
  std::set<std::string> placed;
  for (const auto& [kiln_name, torch_name] : torch_names(exe.program())) placed.insert(torch_name);
  for (const char* half : {"", ".lo"}) {
    SafetensorsFile f = load_safetensors(r.grads + half + ".safetensors");
    std::vector<NamedTensor> kept;
    for (const NamedTensor& t : f.tensors) {
      if (placed.contains(t.name)) {
        kept.push_back(t);
      } else if (!*half) {
        out.unplaced[t.name] = gpu_test::values(f, t.name);
      }
    }
    const std::string path = r.grads + half + ".placed.safetensors";
    save_safetensors(path, kept);
    load_torch_weights(exe, path);
    std::filesystem::remove(path);  // four parameter-sized files a case: read once
    std::filesystem::remove(r.grads + half + ".safetensors");
    Gradients values = testing::parameters_by_torch_name(exe, /*values=*/true);
    if (!*half) {
      out.step.grads = std::move(values);
    } else {
      for (auto& [name, lo] : values)
        for (size_t i = 0; i < lo.size(); ++i) out.step.grads[name][i] += lo[i];
    }
  }
  return out;
}

double largest_magnitude(const Gradients& g) {
  double largest = 0;
  for (const auto& [name, v] : g)
    for (double x : v) largest = std::max(largest, std::abs(x));
  return largest;
}

void check_draw(const Draw& d, uint64_t seed) {
  const TimmReference r = timm_reference(d, seed);
  const ImportedModel m = import_onnx(r.onnx);
  for (const std::string& note : m.notes) std::printf("%s (%s): note: %s\n", d.model.c_str(), d.exporter.c_str(), note.c_str());

  // The logits' bound: kLogitsBound, or 4 times PyTorch's own spread (its fp32 logits against its
  // float64 ones) where the model's fp32 rounding is larger: two fp32 implementations each sit
  // about a spread from the exact logits (efficientnetv2_rw_t: PyTorch's spread 3.7e-5, kiln's gap
  // 4.0e-5). A wrong layer moves the logits by O(1) whatever the spread.
  const std::vector<double> torch64 = gpu_test::values(r.torch, "logits64");
  const auto check_logits = [&](Device device, const char* torch_logits) {
    const std::vector<double> torch32 = as_doubles(gpu_test::f32_values(r.torch, torch_logits));
    const double spread = relative_gap(torch32, torch64);
    const double bound = std::max(kLogitsBound, 4 * spread);
    const double gap = relative_gap(testing::inference_logits(m, device, r.nhwc, kBatch), torch32);
    std::printf("%s (%s): imported logits vs timm's, largest gap / largest logit: %s %.2e (PyTorch's fp32 spread %.2e, "
                "bound %.2e)\n",
                d.model.c_str(), d.exporter.c_str(), device == Device::CPU ? "CPU" : "GPU", gap, spread, bound);
    EXPECT_LT(gap, bound) << device_name(device) << " logits";
  };
  check_logits(Device::CPU, "logits");
  if (gpu_test::torch_missing(Device::CUDA).empty()) check_logits(Device::CUDA, "logits_cuda");

  const TorchStep want = torch_step(m, r);
  const Step got = imported_step(m, r);
  const StepGap gap = testing::step_gap(got, want.step);
  std::printf("%s (%s): float64 step, imported vs timm's: logits %.2e, loss %.2e, worst gradient %.2e of the largest (%s), "
              "%zu parameters\n",
              d.model.c_str(), d.exporter.c_str(), gap.logits, gap.loss, gap.worst_gradient, gap.worst_name.c_str(),
              got.grads.size());
  EXPECT_LT(gap.logits, kStepBound) << "float64 step's logits";
  EXPECT_LT(gap.loss, kStepBound) << "float64 step's loss";
  EXPECT_TRUE(gap.missing.empty()) << gap.missing.size() << " parameters on one side only, e.g. " << gap.missing.front();
  EXPECT_LT(gap.worst_gradient, kStepBound) << "gradient of " << gap.worst_name;
  // A parameter kiln does not train must not move PyTorch's loss either.
  const double largest = largest_magnitude(want.step.grads);
  for (const auto& [name, g] : want.unplaced)
    EXPECT_LE(largest_magnitude({{name, g}}), kStepBound * largest) << name << ": PyTorch trains it, the import has no parameter for it";
}

class TimmOnnxExport : public ::testing::TestWithParam<int> {};

TEST_P(TimmOnnxExport, HeldOutModelImportsToTimmsLogitsAndStepsAsPyTorch) {
  if (const std::string why = timm_missing(); !why.empty()) GTEST_SKIP() << why;
  const uint64_t seed = timm_seed();
  const std::vector<Draw> draws = drawn(seed);
  ASSERT_LT(size_t(GetParam()), draws.size());
  const Draw& d = draws[size_t(GetParam())];
  SCOPED_TRACE(fmt::format("KILN_TIMM_SEED={} drew timm's {} through the {} exporter", seed, d.model, d.exporter));
  try {  // inside the trace, so an import kiln refuses names the seed too
    check_draw(d, seed);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Drawn, TimmOnnxExport, ::testing::Range(0, draw_count()));

// The bounds catch a wrong import, on the seed's first model: its import with one mistake an
// importer could make put in by hand (one convolution's filter with its input channels reversed,
// a layout misread), and its right step against PyTorch's with two gradients of the same size
// exchanged (a name mismatch). Each lands orders of magnitude past its bound.
TEST(TimmOnnxExportBounds, AWrongImportIsCaught) {
  if (const std::string why = timm_missing(); !why.empty()) GTEST_SKIP() << why;
  const uint64_t seed = timm_seed();
  const Draw d = drawn(seed).at(0);
  SCOPED_TRACE(fmt::format("KILN_TIMM_SEED={} drew timm's {} through the {} exporter", seed, d.model, d.exporter));
  const TimmReference r = timm_reference(d, seed);
  const ImportedModel right = import_onnx(r.onnx);
  const TorchStep want = torch_step(right, r);

  ImportedModel wrong = right;
  NamedTensor* conv = nullptr;
  for (NamedTensor& t : wrong.weights)
    if (!conv && t.dtype == DType::F32 && t.shape.size() == 4 && t.shape[1] > 1) conv = &t;
  ASSERT_NE(conv, nullptr) << "no convolution of several input channels";
  testing::reverse_input_channels(*conv);
  const double wrong_logits = relative_gap(testing::inference_logits(wrong, Device::CPU, r.nhwc, kBatch),
                                           as_doubles(gpu_test::f32_values(r.torch, "logits")));
  const StepGap wrong_step = testing::step_gap(imported_step(wrong, r), want.step);

  // Two gradients of the same size exchanged: the one holding the largest gradient of all (or, where
  // no other has its size, the next largest) with another of its size.
  const Step got = imported_step(right, r);
  std::vector<std::pair<double, std::string>> by_size;
  for (const auto& [name, g] : got.grads) by_size.emplace_back(largest_magnitude({{name, g}}), name);
  std::sort(by_size.rbegin(), by_size.rend());
  Step exchanged = got;
  std::string first, second;
  for (const auto& [magnitude, name] : by_size) {
    for (const auto& [other, g] : exchanged.grads)
      if (other != name && g.size() == exchanged.grads[name].size()) {
        first = name, second = other;
        break;
      }
    if (!first.empty()) break;
  }
  if (!first.empty()) std::swap(exchanged.grads[first], exchanged.grads[second]);
  ASSERT_FALSE(first.empty()) << "no two parameters of the same size";
  const StepGap exchanged_gap = testing::step_gap(exchanged, want.step);

  std::printf("%s (%s): %s with its input channels reversed: logits %.2e (bound %.0e), step's worst gradient %.2e "
              "(bound %.0e); gradients of %s and %s exchanged: %.2e\n",
              d.model.c_str(), d.exporter.c_str(), conv->name.c_str(), wrong_logits, kLogitsBound,
              wrong_step.worst_gradient, kStepBound, first.c_str(), second.c_str(), exchanged_gap.worst_gradient);
  EXPECT_LT(testing::step_gap(got, want.step).worst_gradient, kStepBound) << "the right import";
  EXPECT_GT(wrong_logits, 100 * kLogitsBound);
  EXPECT_GT(wrong_step.worst_gradient, 100 * kStepBound);
  EXPECT_GT(exchanged_gap.worst_gradient, 100 * kStepBound);
}

}  // namespace
}  // namespace kiln

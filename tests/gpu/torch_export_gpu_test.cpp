// kiln's weights read by PyTorch: a zoo model with random weights and BatchNorm statistics away from
// their defaults, written by kiln::export_torch_weights, loads into the torchvision model of the same
// name with strict=True (bench/torch_load_kiln_export.py), whose eval-mode logits on the CPU and on
// the GPU (fp32, no TF32) match kiln's on the CPU. The reverse of torchvision_weights_gpu_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "kiln/compile.h"
#include "kiln/export.h"
#include "kiln/zoo.h"
#include "support/gpu_test_util.h"
#include "support/random_batch_norms.h"

namespace kiln {
namespace {

using gpu_test::torch_available;

using testing::randomize_batch_norms;

// The largest difference relative to the largest logit.
double relative_gap(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, double(std::abs(a[i] - b[i]))), scale = std::max(scale, double(std::abs(b[i])));
  return a.size() == b.size() && scale > 0 ? worst / scale : 1e9;
}

class TorchExport : public ::testing::TestWithParam<const char*> {};

TEST_P(TorchExport, TorchvisionLoadsKilnsWeightsStrictlyAndGivesItsLogits) {
  if (!torch_available()) GTEST_SKIP() << "needs a GPU and python3 with torch, torchvision and safetensors";
  const std::string model = GetParam();
  constexpr int N = 2, C = 3, H = 224, W = 224;
  CompileOptions o;
  o.device = Device::CPU, o.batch = N;
  Executable exe(compile(zoo::by_name(model), o), 13);
  std::mt19937 rng(17);
  randomize_batch_norms(exe, rng);
  std::vector<float> x(N * C * H * W), nhwc(x.size());
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& v : x) v = normal(rng);
  for (int b = 0; b < N; ++b)
    for (int ch = 0; ch < C; ++ch)
      for (int y = 0; y < H; ++y)
        for (int z = 0; z < W; ++z) nhwc[((b * H + y) * W + z) * C + ch] = x[((b * C + ch) * H + y) * W + z];
  exe.write(exe.program().input, nhwc.data(), nhwc.size() * sizeof(float));
  exe.run_inference({});
  const std::vector<float> kiln = exe.read<float>(exe.program().inference_logits);

  const auto dir = std::filesystem::temp_directory_path() / "kiln_torch_export";
  std::filesystem::create_directories(dir);
  const std::string weights = (dir / (model + ".safetensors")).string();
  TorchExportOptions options;
  options.overwrite = true;  // a file of an earlier run of this test
  options.conv_bias_before_bn = model.rfind("vgg", 0) == 0;  // torchvision's VGG convolutions have a bias
  export_torch_weights(exe, weights, options);
  const SafetensorsFile torch = gpu_test::torch_reference("torch_load_kiln_export.py", "kiln_torch_export", model,
                                                          {gpu_test::f32_tensor("x", x, {N, C, H, W})},
                                                          {{"model", model}, {"weights", weights}});
  const double cpu = relative_gap(gpu_test::f32_values(torch, "logits"), kiln);
  const double gpu = relative_gap(gpu_test::f32_values(torch, "logits_cuda"), kiln);
  std::printf("%s: torchvision with kiln's exported weights vs kiln, largest gap / largest logit: PyTorch CPU %.2e, "
              "GPU %.2e\n", model.c_str(), cpu, gpu);
  // The bound of torchvision_weights_gpu_test.cpp, the same comparison the other way round: fp32 in
  // other summation orders measured 0.5-2.3e-6; a misplaced weight moves the logits by O(1).
  EXPECT_LT(cpu, 2e-5);
  EXPECT_LT(gpu, 2e-5);
}

INSTANTIATE_TEST_SUITE_P(Models, TorchExport, ::testing::Values("resnet18", "resnet50", "vgg16_bn"));

}  // namespace
}  // namespace kiln

// Fine-tuning with a frozen backbone on the GPU, in mixed precision: the frozen layers read fp16
// copies of their own (refreshed when the host writes weights, outside the optimizer's region), the
// captured step leaves their weights and BN statistics as they are, and the training forward of a
// frozen backbone is its inference forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "kiln/zoo.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

template <class T>
void put(Executable& exe, int id, const std::vector<T>& v) {
  exe.write(id, v.data(), v.size() * sizeof(T));
}

std::vector<float> normal(size_t n, std::mt19937& rng, float mean, float stddev) {
  std::normal_distribution<float> d(mean, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::unique_ptr<Executable> frozen_resnet(Precision precision, const std::string& freeze) {
  CompileOptions o;
  o.device = Device::CUDA, o.precision = precision, o.batch = 16;
  o.freeze = freeze;
  o.optimizer.set("weight_decay", 0.05);
  o.cuda.tune = false;
  auto made = std::make_unique<Executable>(compile(zoo::resnet18_cifar(), o), 3);
  Executable& exe = *made;
  std::mt19937 rng(5);
  const Program& p = exe.program();
  put(exe, p.input, normal(numel(p.tensors[p.input].shape), rng, 0.f, 1.f));
  std::vector<int32_t> labels(16);
  for (auto& l : labels) l = int32_t(rng() % 10);
  put(exe, p.label, labels);
  for (int id : p.buffers) {  // BN statistics away from their defaults: eval and batch statistics differ
    const TensorSpec& t = p.tensors[id];
    if (t.role != TensorRole::Buffer) continue;
    const bool var = t.name.find("running_var") != std::string::npos;
    put(exe, id, normal(numel(t.shape), rng, var ? 1.5f : 0.3f, var ? 0.2f : 0.5f));
  }
  return made;
}

class FreezeOnGpu : public ::testing::TestWithParam<Precision> {};

TEST_P(FreezeOnGpu, CapturedStepsLeaveTheFrozenLayersAloneAndTrainTheRest) {
  if (!gpu_test::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto made = frozen_resnet(GetParam(), "layer3");
  Executable& exe = *made;
  const Program& p = exe.program();
  std::vector<int> frozen, trained;
  for (int id : p.buffers)  // frozen weights and every BN's statistics; not fp16's loss scale, which counts steps
    if (p.tensors[id].name.rfind("loss_scale", 0) != 0) frozen.push_back(id);
  for (int id : p.params) trained.push_back(id);
  std::vector<std::vector<float>> frozen_before, trained_before;
  for (int id : frozen) frozen_before.push_back(exe.read<float>(id));
  for (int id : trained) trained_before.push_back(exe.read<float>(id));
  for (int s = 0; s < 4; ++s) exe.run_step({0.05f, s, 11});  // the second step is captured, the rest replay it
  for (size_t i = 0; i < frozen.size(); ++i) {
    const std::string& name = p.tensors[frozen[i]].name;
    const bool in_frozen_part = name.rfind("layer4", 0) != 0 && name.rfind("fc", 0) != 0;
    if (in_frozen_part) EXPECT_EQ(exe.read<float>(frozen[i]), frozen_before[i]) << name;
    else EXPECT_NE(exe.read<float>(frozen[i]), frozen_before[i]) << name << ": a BN that trains updates its statistics";
  }
  for (size_t i = 0; i < trained.size(); ++i) EXPECT_NE(exe.read<float>(trained[i]), trained_before[i]) << p.tensors[trained[i]].name;
}

TEST_P(FreezeOnGpu, AFrozenBackboneComputesItsInferenceForwardInTraining) {
  if (!gpu_test::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto made = frozen_resnet(GetParam(), "layer4");
  Executable& exe = *made;
  const Program& p = exe.program();
  exe.run_inference({});
  const std::vector<float> eval = exe.read<float>(p.inference_logits);
  exe.run_forward({0.f, 0, 11});
  const std::vector<float> train = exe.read<float>(p.logits);
  ASSERT_EQ(train.size(), eval.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < eval.size(); ++i)
    worst = std::max(worst, double(std::abs(train[i] - eval[i]))), scale = std::max(scale, double(std::abs(eval[i])));
  // The same ops on the same fp16 inputs: equal up to the order of a reduction in the head (fp32).
  EXPECT_LE(worst, 1e-5 * scale + 1e-6);
  const auto trained = frozen_resnet(GetParam(), "layer1");  // layer2-4 in training mode: batch statistics
  trained->run_forward({0.f, 0, 11});
  const std::vector<float> other = trained->read<float>(trained->program().logits);
  double gap = 0;
  for (size_t i = 0; i < eval.size(); ++i) gap = std::max(gap, double(std::abs(other[i] - eval[i])));
  EXPECT_GT(gap, 1e-2 * scale) << "batch statistics would have given other logits: the bound above can fail";
}

INSTANTIATE_TEST_SUITE_P(Precisions, FreezeOnGpu, ::testing::Values(Precision::FP16, Precision::BF16, Precision::FP32),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace kiln

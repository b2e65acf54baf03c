// kiln trains the digits CNN along PyTorch's curve: from the same initial weights (PyTorch draws
// them, bench/torch_training_reference.py; kiln loads them), on the same 300 batches of data/digits
// in the same order (no augmentation), with the same SGD, kiln's per-step loss (Trainer::step)
// tracks PyTorch's twin of the model, fp32 on the CPU and on the GPU (no TF32 on either side).
//
// The two sides cannot take the same steps: the model's dropout draws its masks from each side's
// own random numbers, and the runs part from there. PyTorch therefore trains with several dropout
// seeds, which gives the spread of curves that dropout alone makes. The curves are smoothed over 20
// steps, and a curve's distance from a set of curves is the mean over the steps of its absolute gap
// to their mean. Each PyTorch seed's distance from the other seeds says how far a curve of the same
// recipe lands; kiln's distance from all the seeds must stay within kLeeway times the largest of
// them. PyTorch with another learning rate (a wrong recipe) must land beyond that bound: the bound
// sees a difference that size.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kiln/data.h"
#include "kiln/trainer.h"
#include "kiln/zoo.h"
#include "support/gpu_test_util.h"
#include "support/program_fixture.h"
#include "support/scoped_env.h"
#include "support/torch_training_reference.h"

namespace kiln {
namespace {

constexpr int kSteps = 300, kBatch = 32, kSmooth = 20;
constexpr float kLr = 0.005f, kMomentum = 0.9f, kWeightDecay = 5e-4f;
constexpr float kWrongLr = kLr / 2;  // a recipe the comparison must tell apart
constexpr double kLeeway = 2;
const char* const kTorchSeeds = "1,2,3,4";

std::vector<double> smoothed(const std::vector<double>& curve) {
  std::vector<double> out;
  for (size_t i = 0; i + kSmooth <= curve.size(); ++i)
    out.push_back(std::accumulate(curve.begin() + long(i), curve.begin() + long(i + kSmooth), 0.0) / kSmooth);
  return out;
}

// The mean over the steps of |curve - mean of `others`| (all smoothed).
double distance(const std::vector<double>& curve, const std::vector<std::vector<double>>& others) {
  double sum = 0;
  for (size_t i = 0; i < curve.size(); ++i) {
    double mean = 0;
    for (const auto& o : others) mean += o[i];
    sum += std::abs(curve[i] - mean / double(others.size()));
  }
  return sum / double(curve.size());
}

class DigitsCurve : public ::testing::TestWithParam<Device> {};

TEST_P(DigitsCurve, KilnTracksPyTorchsTrainingCurve) {
  const Device device = GetParam();
  if (const std::string why = gpu_test::torch_missing(device); !why.empty()) GTEST_SKIP() << why;
  testing::ScopedEnv no_tf32("KILN_CONV_TF32", "0");
  const Dataset digits = load_dataset(testing::shared_digits_dir(gpu_test::source_dir()), "idx", true);
  ASSERT_EQ(digits.height, 20);
  ASSERT_EQ(digits.channels, 1);
  // Normalized by the training set's mean and deviation; with one channel NHWC is NCHW.
  double sum = 0, sq = 0;
  for (uint8_t p : digits.images) sum += p / 255.0, sq += (p / 255.0) * (p / 255.0);
  const double n = double(digits.images.size()), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  // The batches: the training set in a fresh random order each pass, kSteps x kBatch samples.
  std::vector<int64_t> order;
  std::mt19937 rng(3);
  while (order.size() < size_t(kSteps * kBatch)) {
    std::vector<int64_t> pass(size_t(digits.count));
    std::iota(pass.begin(), pass.end(), 0);
    std::shuffle(pass.begin(), pass.end(), rng);
    order.insert(order.end(), pass.begin(), pass.end());
  }
  const int64_t pixels = digits.image_size();
  std::vector<float> x(size_t(kSteps * kBatch * pixels));
  std::vector<int32_t> y(size_t(kSteps * kBatch));
  for (size_t i = 0; i < y.size(); ++i) {
    const int64_t sample = order[i];
    y[i] = digits.labels[size_t(sample)];
    for (int64_t k = 0; k < pixels; ++k)
      x[i * size_t(pixels) + size_t(k)] = float((digits.images[size_t(sample * pixels + k)] / 255.0 - mean) / sd);
  }

  const std::string folder = "kiln_digits_curve", stem = fmt::format("digits_{}", device_name(device));
  const std::string weights = gpu_test::torch_initial_weights(folder, stem, "digits_cnn", 20, 5);

  // kiln: Trainer::step on each batch.
  CompileOptions o;
  o.device = device, o.batch = kBatch;
  o.optimizer.name = "sgd";
  o.optimizer.set("momentum", kMomentum).set("weight_decay", kWeightDecay);
  TrainOptions t;
  t.seed = 1;  // kiln's dropout masks
  Trainer trainer(zoo::digits_cnn(), o, t);
  trainer.load_torch_weights(weights);
  std::vector<double> kiln_curve;
  for (int s = 0; s < kSteps; ++s) {
    Batch b;
    b.images.assign(x.begin() + long(s) * kBatch * pixels, x.begin() + long(s + 1) * kBatch * pixels);
    b.labels.assign(y.begin() + long(s) * kBatch, y.begin() + long(s + 1) * kBatch);
    b.size = kBatch;
    kiln_curve.push_back(trainer.step(b, kLr));
  }

  // PyTorch: the same batches, once per dropout seed, and once with the wrong learning rate.
  const SafetensorsFile torch = gpu_test::torch_reference(
      gpu_test::kTrainingReference, folder, stem,
      {gpu_test::f32_tensor("x", x, {kSteps, kBatch, 1, 20, 20}), gpu_test::i32_tensor("y", y, {kSteps, kBatch})},
      {{"mode", "curve"},
       {"model", "digits_cnn"},
       {"side", "20"},
       {"weights", weights},
       {"device", device == Device::CUDA ? "cuda" : "cpu"},
       {"lr", fmt::format("{}", double(kLr))},
       {"momentum", fmt::format("{}", double(kMomentum))},
       {"weight_decay", fmt::format("{}", double(kWeightDecay))},
       {"seeds", kTorchSeeds},
       {"wrong_lr", fmt::format("{}", double(kWrongLr))}});
  const std::vector<double> all = gpu_test::values(torch, "losses"), wrong = gpu_test::values(torch, "losses_wrong");
  ASSERT_EQ(all.size() % kSteps, 0u);
  std::vector<std::vector<double>> seeds;
  for (size_t i = 0; i < all.size(); i += kSteps)
    seeds.push_back(smoothed(std::vector<double>(all.begin() + long(i), all.begin() + long(i + kSteps))));
  ASSERT_GE(seeds.size(), 3u);

  double spread = 0;  // the largest distance of one PyTorch seed from the others
  for (size_t s = 0; s < seeds.size(); ++s) {
    std::vector<std::vector<double>> others = seeds;
    others.erase(others.begin() + long(s));
    spread = std::max(spread, distance(seeds[s], others));
  }
  const double kiln = distance(smoothed(kiln_curve), seeds), wrong_lr = distance(smoothed(wrong), seeds);
  const double bound = kLeeway * spread;
  std::printf("digits curve on %s: kiln's distance from PyTorch's seeds %.4f, the seeds' from each other up to %.4f, "
              "bound %.4f; PyTorch at lr %.3g: %.4f (%.1f x the bound); loss over the first and last %d steps: "
              "kiln %.3f -> %.3f, PyTorch %.3f -> %.3f\n",
              device_name(device), kiln, spread, bound, double(kWrongLr), wrong_lr, wrong_lr / bound, kSmooth,
              smoothed(kiln_curve).front(), smoothed(kiln_curve).back(), seeds[0].front(), seeds[0].back());
  EXPECT_LE(kiln, bound) << "kiln's training curve leaves the spread of PyTorch's dropout seeds";
  EXPECT_GE(wrong_lr, bound) << "the bound would not tell a learning rate of " << kWrongLr << " from " << kLr;
  EXPECT_LT(smoothed(kiln_curve).back(), 0.5 * smoothed(kiln_curve).front()) << "kiln did not learn";
}

INSTANTIATE_TEST_SUITE_P(Devices, DigitsCurve, ::testing::Values(Device::CPU, Device::CUDA),
                         [](const ::testing::TestParamInfo<Device>& info) { return device_name(info.param); });

}  // namespace
}  // namespace kiln

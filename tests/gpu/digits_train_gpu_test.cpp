// The digits CNN trains on the GPU in fp32, fp16 and bf16 and tracks the CPU fp32 run of the same
// recipe and seed: same first-step loss (same initial weights, batch, crops and dropout masks)
// and a final test accuracy within half a point.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/trainer.h"
#include "kiln/zoo.h"
#include "support/gpu_test_util.h"
#include "support/program_fixture.h"

namespace kiln {
namespace {

// The README's recipe (scripts/demo.sh): 30 epochs (1,860 steps). Shortened to 10, runs that
// differed only in which cuDNN plans tuning picked ended up to 0.8 points apart (below).
constexpr int kEpochs = 30;

CompileOptions recipe(Device device, Precision precision) {
  CompileOptions c;
  c.device = device, c.precision = precision;
  c.batch = 64;
  c.optimizer.name = "sgd";
  c.optimizer.set("momentum", 0.9).set("nesterov", 1).set("weight_decay", 5e-4);
  c.label_smoothing = 0.1f;
  return c;
}

struct TrainingRun {
  double first_loss = 0, first_epoch_loss = 0, final_loss = 0, accuracy = 0;
  // The same model evaluated with its BN running statistics put back to their initial values
  // (mean 0, variance 1), as a run that never updated them would evaluate.
  double stale_bn_accuracy = 0;
};

TrainingRun train(Device device, Precision precision, const Dataset& train_set, const Dataset& test_set) {
  TrainOptions t;
  t.epochs = kEpochs;
  t.schedule.kind = ScheduleKind::Cosine;
  t.schedule.lr = 0.05f;
  t.augment.pad_crop = 1;
  t.seed = 1;
  CompileOptions c = recipe(device, precision);
  c.input_hwc = {train_set.height, train_set.width, train_set.channels};
  Trainer trainer(zoo::digits_cnn(), c, t);
  TrainingRun run;
  bool first = true;
  const auto reports = trainer.fit(train_set, test_set, [&](const StepReport& s) {
    if (first) run.first_loss = s.loss, first = false;
  });
  run.first_epoch_loss = reports.front().train_loss;
  run.final_loss = reports.back().train_loss;
  run.accuracy = reports.back().test_accuracy;
  // Evaluation again, outside fit: the inference program alone gives the same count.
  EXPECT_DOUBLE_EQ(trainer.evaluate(test_set), run.accuracy);
  Executable& exe = trainer.executable();
  for (int id : exe.program().buffers) {
    const TensorSpec& b = exe.program().tensors[id];
    if (b.name.find("running_") == std::string::npos) continue;
    const std::vector<float> initial(b.bytes() / sizeof(float), b.name.find("running_var") != std::string::npos);
    exe.write(id, initial.data(), b.bytes());
  }
  run.stale_bn_accuracy = trainer.evaluate(test_set);
  return run;
}

TEST(DigitsGpu, TrainsInEveryPrecisionAndTracksTheCpu) {
  KILN_REQUIRE_GPU();
  const std::string dir = testing::shared_digits_dir(gpu_test::source_dir());
  const Dataset train_set = load_dataset(dir, "idx", true), test_set = load_dataset(dir, "idx", false);
  const TrainingRun cpu = train(Device::CPU, Precision::FP32, train_set, test_set);
  std::printf("digits cpu fp32: first loss %.5f, final loss %.5f, test accuracy %.4f\n", cpu.first_loss,
              cpu.final_loss, cpu.accuracy);
  ASSERT_GT(cpu.accuracy, 0.95);  // the reference itself learned
  // The accuracy bound below catches a model that evaluates wrongly: the CPU's own model with its
  // BN running statistics never updated scores far more than half a point lower (measured after
  // 10 epochs: 85.6% against 97.9% on the CPU machine, 81.1% against 98.3% on the H200's host).
  std::printf("digits cpu fp32 with its BN running statistics at their initial values: test accuracy %.4f\n",
              cpu.stale_bn_accuracy);
  EXPECT_GT(std::fabs(cpu.stale_bn_accuracy - cpu.accuracy), 0.005);
  for (Precision p : {Precision::FP32, Precision::FP16, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    const TrainingRun gpu = train(Device::CUDA, p, train_set, test_set);
    std::printf("digits cuda %s: first loss %.5f, first epoch %.5f (cpu %.5f), final loss %.5f, test accuracy %.4f "
                "(cpu %.4f)\n", precision_name(p), gpu.first_loss, gpu.first_epoch_loss, cpu.first_epoch_loss,
                gpu.final_loss, gpu.accuracy, cpu.accuracy);
    // The first step sees the same weights, batch and masks: only rounding differs — the
    // accumulation order in fp32, the inputs' and weights' rounding (2^-8 relative for bf16,
    // 2^-11 for fp16) spread over ~2.3 nats of loss in half precision. A wrong kernel moves it
    // by far more (a zeroed layer or a transposed weight changes it in the first decimal).
    const double first_tol = p == Precision::FP32 ? 1e-3 : p == Precision::FP16 ? 5e-3 : 2e-2;
    EXPECT_NEAR(gpu.first_loss, cpu.first_loss, first_tol * cpu.first_loss);
    EXPECT_LT(gpu.final_loss, 0.5 * gpu.first_loss);
    // After the first steps the runs part: the GPU rounds differently from the CPU, and which
    // cuDNN plans tuning picks changes it again from one process to the next. Measured on the
    // H200 with the recipe cut to 10 epochs: test accuracies 97.5-98.7% against the CPU's 98.3%.
    // Over the full 30 epochs the runs converge: three processes per precision ended at 98.5-98.8%
    // (fp32), 98.7-98.8% (fp16) and 98.6-98.8% (bf16) against the CPU's 98.6% on the same host
    // (bench/results/digits_30epoch_cpu_gpu_h200_2026-11-30_2c03c28.jsonl), so the half
    // point holds with room. It still catches a model that evaluates wrongly: stale BN
    // statistics cost 12-17 points after 10 epochs (checked on the CPU run above).
    EXPECT_NEAR(gpu.accuracy, cpu.accuracy, 0.005);
  }
}

}  // namespace
}  // namespace kiln

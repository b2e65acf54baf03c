// Dynamic loss scaling through compiled fp32 CPU programs (forced on: it is off for fp32 by
// default): the scaled run trains as the unscaled one does, a step whose gradients hold inf is
// skipped and backs the scale off, clean steps grow it, and a checkpoint carries it to the resumed
// run.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "support/program_fixture.h"
#include "support/temp_dir.h"
#include "train/tiny_run.h"

namespace kiln {
namespace {

using testing::TempDir;
using testing::tiny_compile;
using testing::tiny_dataset;
using testing::tiny_model;
using testing::tiny_train;

CompileOptions scaled(int interval = 2000, const std::string& optimizer = "sgd") {
  CompileOptions c = tiny_compile(optimizer);  // SGD's and LARS's momentum: 0.9, their default
  c.optimizer.set("weight_decay", 1e-3);
  c.loss_scaling.mode = LossScaleMode::Dynamic;
  c.loss_scaling.growth_interval = interval;
  return c;
}

// A compiled tiny model on one fixed random batch.
struct TinyRun {
  Executable exe;
  explicit TinyRun(const CompileOptions& c) : exe(compile(tiny_model(), c), 3) {
    std::mt19937 rng(11);
    testing::fill_normal(exe.tensor(exe.program().input), rng);
    testing::fill_labels(exe.tensor(exe.program().label), 3, rng);
  }
  const Program& program() const { return exe.program(); }
  // One training step at learning rate 0.05; returns the loss.
  double step(int64_t index) {
    const StepScalars s{0.05f, index, 1};
    exe.run_forward(s);
    exe.run_backward(s);
    exe.run_update(s);
    return testing::loss_of(exe);
  }
  std::vector<float> read(int id) { return exe.read<float>(id); }
  float scale() { return read(program().loss_scale)[0]; }
  int32_t clean_steps() { return exe.read<int32_t>(program().loss_scale_clean_steps)[0]; }
};

TEST(LossScaling, TrainsAsTheUnscaledRun) {
  for (const std::string optimizer : {"sgd", "adamw", "lars"}) {
    SCOPED_TRACE(optimizer);
    CompileOptions off = scaled(2000, optimizer);
    off.loss_scaling.mode = LossScaleMode::Off;
    TinyRun plain(off), run(scaled(2000, optimizer));
    ASSERT_EQ(plain.program().loss_scale, -1);
    for (int64_t i = 0; i < 4; ++i) {
      // The loss the trainer reads is the unscaled one.
      const double want = plain.step(i);
      EXPECT_NEAR(run.step(i), want, 1e-6 * std::abs(want)) << "step " << i;
    }
    // Scaling by a power of two and dividing it back out is exact: the runs agree to fp32
    // rounding (bit for bit, in practice).
    auto agree = [&](int scaled_id, int plain_id) {
      EXPECT_LE(testing::rel_err(run.read(scaled_id), plain.read(plain_id)), 1e-6)
          << plain.program().tensors[plain_id].name;
    };
    agree(run.program().param_region, plain.program().param_region);
    for (size_t s = 0; s < plain.program().opt_state_regions.size(); ++s)
      agree(run.program().opt_state_regions[s], plain.program().opt_state_regions[s]);
    EXPECT_EQ(run.scale(), 65536.f);
    EXPECT_EQ(run.clean_steps(), 4);
  }
}

TEST(LossScaling, TheBackwardRunsOnScaledGradients) {
  CompileOptions off = scaled();
  off.loss_scaling.mode = LossScaleMode::Off;
  TinyRun plain(off), run(scaled());
  for (TinyRun* r : {&plain, &run}) {
    r->exe.run_forward({0.05f, 0, 1});
    r->exe.run_backward({0.05f, 0, 1});
  }
  const std::vector<float> g = run.read(run.program().grad_region), want = plain.read(plain.program().grad_region);
  std::vector<float> unscaled(g.size());
  for (size_t i = 0; i < g.size(); ++i) unscaled[i] = g[i] / 65536.f;
  EXPECT_LE(testing::rel_err(unscaled, want), 1e-6);
}

TEST(LossScaling, AnInfGradientSkipsTheStepAndBacksOff) {
  TinyRun run(scaled());
  run.step(0);
  run.step(1);
  ASSERT_EQ(run.clean_steps(), 2);
  const Program& p = run.program();
  const StepScalars s{0.05f, 2, 1};
  run.exe.run_forward(s);
  run.exe.run_backward(s);
  // One element of one parameter's gradient (a view into the fp32 gradient region) turns inf.
  const int grad = run.exe.id("fc.weight.grad");
  std::vector<float> g = run.read(grad);
  g[3] = std::numeric_limits<float>::infinity();
  run.exe.write(grad, g.data(), g.size() * sizeof(float));
  const std::vector<float> params = run.read(p.param_region), momentum = run.read(p.opt_state_regions[0]);
  run.exe.run_update(s);
  EXPECT_EQ(run.read(p.param_region), params) << "parameters must be untouched, bit for bit";
  EXPECT_EQ(run.read(p.opt_state_regions[0]), momentum) << "momentum must be untouched, bit for bit";
  EXPECT_EQ(run.exe.read<int32_t>(p.found_nonfinite)[0], 1);
  EXPECT_EQ(run.scale(), 32768.f);
  EXPECT_EQ(run.clean_steps(), 0);
  // The next clean step updates again, with the smaller scale.
  run.step(3);
  EXPECT_NE(run.read(p.param_region), params);
  EXPECT_EQ(run.exe.read<int32_t>(p.found_nonfinite)[0], 0);
  EXPECT_EQ(run.scale(), 32768.f);
  EXPECT_EQ(run.clean_steps(), 1);
}

TEST(LossScaling, NaNInABufferWrittenGradientIsFoundToo) {
  // BN's parameter gradients are written into the fp32 region directly (no compute copy).
  TinyRun run(scaled());
  const StepScalars s{0.05f, 0, 1};
  run.exe.run_forward(s);
  run.exe.run_backward(s);
  const int grad = run.exe.id("bn1.bias.grad");
  std::vector<float> g = run.read(grad);
  g[0] = std::numeric_limits<float>::quiet_NaN();
  run.exe.write(grad, g.data(), g.size() * sizeof(float));
  const std::vector<float> params = run.read(run.program().param_region);
  run.exe.run_update(s);
  EXPECT_EQ(run.read(run.program().param_region), params);
  EXPECT_EQ(run.scale(), 32768.f);
}

TEST(LossScaling, GrowsAfterTheIntervalOfCleanSteps) {
  TinyRun run(scaled(3));
  run.step(0);
  run.step(1);
  EXPECT_EQ(run.scale(), 65536.f);
  EXPECT_EQ(run.clean_steps(), 2);
  run.step(2);
  EXPECT_EQ(run.scale(), 131072.f);
  EXPECT_EQ(run.clean_steps(), 0);
  for (int64_t i = 3; i < 6; ++i) run.step(i);
  EXPECT_EQ(run.scale(), 262144.f);
}

TEST(LossScaling, InitialScaleAndReinitializationFollowTheOptions) {
  CompileOptions c = scaled();
  c.loss_scaling.init_scale = 1024.f;
  TinyRun run(c);
  EXPECT_EQ(run.scale(), 1024.f);
  run.step(0);
  ASSERT_EQ(run.clean_steps(), 1);
  run.exe.init_state(3);
  EXPECT_EQ(run.scale(), 1024.f);
  EXPECT_EQ(run.clean_steps(), 0);
}

TEST(LossScaling, CheckpointResumesWithTheSameScale) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  float scale = 0;
  int32_t clean = 0;
  {
    Trainer trainer(tiny_model(), scaled(3), tiny_train(1, ckpt));
    trainer.fit(tiny_dataset(), {});  // 4 steps of 16: the scale grew once, one clean step since
    Executable& exe = trainer.executable();
    scale = exe.read<float>(exe.program().loss_scale)[0];
    clean = exe.read<int32_t>(exe.program().loss_scale_clean_steps)[0];
    ASSERT_EQ(scale, 131072.f);
    ASSERT_EQ(clean, 1);
  }
  TrainOptions resume = tiny_train(2, ckpt);
  resume.resume = true;
  Trainer resumed(tiny_model(), scaled(3), resume);
  Executable& exe = resumed.executable();
  EXPECT_EQ(exe.read<float>(exe.program().loss_scale)[0], scale);
  EXPECT_EQ(exe.read<int32_t>(exe.program().loss_scale_clean_steps)[0], clean);
  // A fresh run of the same recipe starts from the initial scale.
  Trainer fresh(tiny_model(), scaled(3), tiny_train(1));
  EXPECT_EQ(fresh.executable().read<float>(fresh.executable().program().loss_scale)[0], 65536.f);
}

}  // namespace
}  // namespace kiln

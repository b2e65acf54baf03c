// A run that diverges stops with an error naming where, and never writes a checkpoint holding
// NaN or infinity; a checkpoint that holds one is refused when loaded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "support/cpu_test_util.h"
#include "support/temp_dir.h"
#include "train/tiny_run.h"

namespace kiln {
namespace {

using testing::contains;
using testing::error_of;
using testing::expect_error;
using testing::file_names;
using testing::read_bytes;
using testing::TempDir;
using testing::tiny_compile;
using testing::tiny_dataset;
using testing::tiny_model;
using testing::tiny_train;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Overwrites element `index` of a float tensor of the trainer's executable.
void poison(Trainer& trainer, const std::string& tensor, int64_t index, float value) {
  Executable& exe = trainer.executable();
  const int id = exe.id(tensor);
  std::vector<float> values = exe.read<float>(id);
  values.at(size_t(index)) = value;
  exe.write(id, values.data(), values.size() * sizeof(float));
}

TEST(Divergence, NonFiniteLossStopsTrainingAndKeepsTheLastGoodCheckpoint) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  // A sane first epoch, then a learning rate of 5e28: the loss turns to NaN/inf within a few steps.
  TrainOptions t = tiny_train(3, ckpt);
  t.schedule.kind = ScheduleKind::Step;
  t.schedule.step_epochs = 1;
  t.schedule.gamma = 1e30f;
  Trainer trainer(tiny_model(), tiny_compile(), t);
  std::vector<int> epochs;
  std::vector<uint8_t> after_first;
  const std::string msg = error_of([&] {
    trainer.fit(tiny_dataset(), {}, {}, [&](const EpochReport& r) {
      epochs.push_back(r.epoch);
      after_first = read_bytes(ckpt);
    });
  });
  EXPECT_TRUE(contains(msg, "diverged")) << msg;
  EXPECT_TRUE(contains(msg, "epoch 2/3")) << msg;
  EXPECT_TRUE(contains(msg, "step")) << msg;
  EXPECT_TRUE(contains(msg, "The last good checkpoint is '" + ckpt + "' (after epoch 1)")) << msg;
  EXPECT_TRUE(contains(msg, "Lower the learning rate")) << msg;
  EXPECT_EQ(epochs, std::vector<int>{0});
  // The good checkpoint is untouched and loads; no temporary is left beside it.
  ASSERT_FALSE(after_first.empty());
  EXPECT_EQ(read_bytes(ckpt), after_first);
  EXPECT_EQ(load_safetensors(ckpt).metadata.at("epochs_done"), "1");
  EXPECT_EQ(file_names(dir.path()), (std::vector<std::string>{"run.safetensors", "run.safetensors.lock"}));
  // What the diverged trainer holds cannot be saved anywhere either.
  expect_error([&] { trainer.save_checkpoint(dir.file("other.safetensors"), 2); },
               {"refusing to write checkpoint", "non-finite"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("other.safetensors")));
}

TEST(Divergence, WithoutACheckpointTheErrorSaysNothingWasKept) {
  TrainOptions t = tiny_train(2);
  t.schedule.kind = ScheduleKind::Constant;
  t.schedule.lr = 1e30f;
  Trainer trainer(tiny_model(), tiny_compile(), t);
  expect_error([&] { trainer.fit(tiny_dataset(), {}); },
               {"diverged", "epoch 1/2, step", "No checkpoint path was set"});
}

TEST(Divergence, NonFiniteStateBehindAFiniteLossIsCaughtAtTheEndOfTheEpoch) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  // One step per epoch: its loss is computed before the update that the NaN momentum spoils.
  Trainer trainer(tiny_model(), tiny_compile(), tiny_train(2, ckpt));
  poison(trainer, "optimizer.momentum_buffer", 0, kNaN);
  expect_error([&] { trainer.fit(tiny_dataset(16), {}); },
               {"diverged", "after epoch 1/2", "non-finite", "There is no good checkpoint", ckpt});
  EXPECT_FALSE(std::filesystem::exists(ckpt));
}

TEST(Divergence, SaveCheckpointRefusesNonFiniteStateAndKeepsTheOldFile) {
  TempDir dir;
  const std::string ckpt = dir.file("keep.safetensors");
  Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1));
  trainer.fit(tiny_dataset(), {});
  trainer.save_checkpoint(ckpt, 1);
  const std::vector<uint8_t> good = read_bytes(ckpt);
  poison(trainer, "bn1.running_var", 2, std::numeric_limits<float>::infinity());
  expect_error([&] { trainer.save_checkpoint(ckpt, 1); },
               {"refusing to write checkpoint '" + ckpt + "'", "'bn1.running_var'", "1 non-finite value", "inf",
                "index 2", "left as it was"});
  EXPECT_EQ(read_bytes(ckpt), good);
  EXPECT_EQ(file_names(dir.path()), std::vector<std::string>{"keep.safetensors"});
}

TEST(Divergence, StepRejectsANonFiniteLoss) {
  Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1));
  poison(trainer, "fc.weight", 0, kNaN);
  Batch b;
  b.images.assign(16 * 8 * 8, 0.5f);
  b.labels.assign(16, 1);
  b.size = 16;
  expect_error([&] { trainer.step(b, 0.05f); }, {"optimizer step 1", "non-finite loss", "nan"});
}

TEST(Divergence, LoadingACheckpointWithANonFiniteValueNamesTheTensorAndChangesNothing) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  {
    Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1, ckpt));
    trainer.fit(tiny_dataset(), {});
  }
  // The same file with one NaN in a parameter, as a diverged run of an older kiln wrote it.
  SafetensorsFile file = load_safetensors(ckpt);
  for (NamedTensor& t : file.tensors)
    if (t.name == "conv1.weight") std::memcpy(t.data.data() + 3 * sizeof(float), &kNaN, sizeof(float));
  save_safetensors(ckpt, file.tensors, file.metadata);

  TrainOptions resume = tiny_train(2, ckpt);
  resume.resume = true;
  expect_error([&] { Trainer trainer(tiny_model(), tiny_compile(), resume); },
               {"checkpoint '" + ckpt + "'", "'conv1.weight'", "1 non-finite value", "nan", "index 3", "diverged"});

  // Loading into a trainer restores everything or nothing.
  Trainer fresh(tiny_model(), tiny_compile(), tiny_train(1));
  Executable& exe = fresh.executable();
  const std::vector<float> params = exe.read<float>(exe.program().param_region);
  expect_error([&] { fresh.load_checkpoint(ckpt); }, {"'conv1.weight'", "non-finite"});
  EXPECT_EQ(exe.read<float>(exe.program().param_region), params);
}

}  // namespace
}  // namespace kiln

// A stop asked for through TrainOptions::stop (as kiln train's Ctrl-C handler does) ends fit cleanly:
// after the step under way, with kiln::Stopped saying where and what the checkpoint holds; no
// partial epoch is saved, the lock goes with the Trainer, no temporary file is left, and a resumed
// run continues exactly as the uninterrupted run would have. Temporaries of interrupted writes
// are removed when the next run takes the checkpoint's lock.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <optional>

#include "support/cpu_test_util.h"
#include "support/dead_pid.h"
#include "support/temp_dir.h"
#include "train/tiny_run.h"

namespace kiln {
namespace {

using testing::contains;
using testing::dead_pid;
using testing::file_names;
using testing::TempDir;
using testing::tiny_compile;
using testing::tiny_dataset;
using testing::tiny_model;
using testing::tiny_train;

// tiny_train with a stop flag and a report after every step (on_step sees each one).
TrainOptions stoppable(int epochs, const std::string& ckpt, const std::atomic<bool>* stop) {
  TrainOptions t = tiny_train(epochs, ckpt);
  t.stop = stop;
  t.report_seconds = 0;
  return t;
}

// Runs fit, asking for a stop from on_step at (epoch, step); returns what it threw.
std::optional<Stopped> fit_until_stopped(Trainer& trainer, std::atomic<bool>& stop, int epoch, int64_t step,
                                         std::vector<int>* epochs_seen = nullptr) {
  try {
    trainer.fit(
        tiny_dataset(), tiny_dataset(32, 9),
        [&](const StepReport& s) {
          if (s.epoch == epoch && s.step_in_epoch == step) stop = true;
        },
        [&](const EpochReport& r) {
          if (epochs_seen) epochs_seen->push_back(r.epoch);
        });
  } catch (const Stopped& s) {
    return s;
  }
  ADD_FAILURE() << "fit was not stopped";
  return std::nullopt;
}

TEST(Stop, MidEpochKeepsTheLastWholeEpochAndResumesExactly) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  std::atomic<bool> stop{false};
  {
    Trainer trainer(tiny_model(), tiny_compile(), stoppable(3, ckpt, &stop));
    const std::optional<Stopped> s = fit_until_stopped(trainer, stop, 1, 2);  // epoch 2 of 3, step 2 of 4
    ASSERT_TRUE(s);
    EXPECT_EQ(s->epoch, 1);
    EXPECT_EQ(s->epochs, 3);
    EXPECT_EQ(s->step, 2);
    EXPECT_EQ(s->steps_per_epoch, 4);
    EXPECT_EQ(s->checkpoint, ckpt);
    EXPECT_EQ(s->checkpoint_epochs, 1);
    const std::string message = s->what();
    EXPECT_TRUE(contains(message, "stopped at epoch 2/3, step 2/4")) << message;
    EXPECT_TRUE(contains(message, "'" + ckpt + "' holds epoch 1")) << message;
    EXPECT_TRUE(std::filesystem::exists(ckpt + ".lock"));  // held while the Trainer lives
  }
  // The lock went with the Trainer; nothing but the checkpoint is left, and it holds epoch 1.
  EXPECT_EQ(file_names(dir.path()), std::vector<std::string>{"run.safetensors"});
  EXPECT_EQ(load_safetensors(ckpt).metadata.at("epochs_done"), "1");

  TrainOptions resume = tiny_train(3, ckpt);
  resume.resume = true;
  Trainer resumed(tiny_model(), tiny_compile(), resume);
  ASSERT_EQ(resumed.resumed_epochs(), 1);
  const std::vector<EpochReport> rest = resumed.fit(tiny_dataset(), tiny_dataset(32, 9));
  ASSERT_EQ(rest.size(), 2u);

  Trainer whole(tiny_model(), tiny_compile(), tiny_train(3));
  const std::vector<EpochReport> full = whole.fit(tiny_dataset(), tiny_dataset(32, 9));
  ASSERT_EQ(full.size(), 3u);
  EXPECT_EQ(rest.back().train_loss, full.back().train_loss);  // bitwise: the same run
  EXPECT_EQ(rest.back().test_accuracy, full.back().test_accuracy);
  EXPECT_EQ(rest[0].train_loss, full[1].train_loss);
}

TEST(Stop, AfterAnEpochsLastStepThatEpochIsFinishedAndSaved) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  std::atomic<bool> stop{false};
  {
    Trainer trainer(tiny_model(), tiny_compile(), stoppable(3, ckpt, &stop));
    std::vector<int> epochs;
    const std::optional<Stopped> s = fit_until_stopped(trainer, stop, 0, 4, &epochs);
    ASSERT_TRUE(s);
    EXPECT_EQ(epochs, std::vector<int>{0});  // evaluated and saved
    EXPECT_EQ(s->epoch, 1);
    EXPECT_EQ(s->step, 0);
    EXPECT_EQ(s->checkpoint_epochs, 1);
  }
  EXPECT_EQ(file_names(dir.path()), std::vector<std::string>{"run.safetensors"});
  EXPECT_EQ(load_safetensors(ckpt).metadata.at("epochs_done"), "1");
}

TEST(Stop, BeforeAnyCheckpointSaysNoneWasWritten) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  std::atomic<bool> stop{false};
  {
    Trainer trainer(tiny_model(), tiny_compile(), stoppable(2, ckpt, &stop));
    const std::optional<Stopped> s = fit_until_stopped(trainer, stop, 0, 1);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->epoch, 0);
    EXPECT_EQ(s->step, 1);
    EXPECT_EQ(s->checkpoint_epochs, 0);
    EXPECT_TRUE(contains(s->what(), "no checkpoint was written to '" + ckpt + "'")) << s->what();
  }
  EXPECT_TRUE(file_names(dir.path()).empty());

  // Without a checkpoint path; a stop asked for before fit stops it before its first step.
  stop = true;
  Trainer trainer(tiny_model(), tiny_compile(), stoppable(2, "", &stop));
  try {
    trainer.fit(tiny_dataset(), {});
    ADD_FAILURE() << "fit was not stopped";
  } catch (const Stopped& s) {
    EXPECT_EQ(s.epoch, 0);
    EXPECT_EQ(s.step, 0);
    EXPECT_EQ(s.checkpoint, "");
    EXPECT_TRUE(contains(s.what(), "no checkpoint path was set")) << s.what();
  }
}

TEST(Stop, StaleTemporariesAreRemovedWhenTheLockIsTaken) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  const std::string dead = ckpt + ".tmp." + std::to_string(dead_pid());
  const std::string live = ckpt + ".tmp." + std::to_string(::getpid());
  const std::string other = dir.file("other.safetensors.tmp." + std::to_string(dead_pid()));
  const std::string odd = ckpt + ".tmp.x12";
  for (const std::string& path : {dead, live, other, odd}) testing::write_bytes(path, {1, 2, 3});
  {
    Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1, ckpt));
    EXPECT_EQ(trainer.removed_temp_files(), std::vector<std::string>{dead});
    EXPECT_FALSE(std::filesystem::exists(dead));
    EXPECT_TRUE(std::filesystem::exists(live));    // this process runs: it may be writing it
    EXPECT_TRUE(std::filesystem::exists(other));   // another checkpoint's
    EXPECT_TRUE(std::filesystem::exists(odd));      // not a pid
  }
  // Nothing stale: nothing removed.
  CheckpointLock lock(ckpt);
  EXPECT_TRUE(lock.removed_temp_files().empty());
  EXPECT_TRUE(std::filesystem::exists(live));
}

TEST(Stop, AFailedWriteLeavesNoTemporary) {
  TempDir dir;
  // The rename onto a folder that is not empty fails after the whole temporary was written.
  const std::string target = dir.file("run.safetensors");
  std::filesystem::create_directories(target);
  testing::write_bytes(target + "/inside", {1});
  NamedTensor t{"w", DType::F32, {2}, std::vector<std::byte>(8)};
  EXPECT_THROW(save_safetensors(target, {t}), Error);
  EXPECT_EQ(file_names(dir.path()), std::vector<std::string>{"run.safetensors"});
}

}  // namespace
}  // namespace kiln

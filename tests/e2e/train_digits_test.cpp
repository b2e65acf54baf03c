// End to end on the real digits: the README's configuration (scripts/demo.sh) reaches >= 98.5% test accuracy,
// one seed gives one result, and a resumed run continues exactly where it stopped.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "support/program_fixture.h"
#include "kiln/trainer.h"
#include "kiln/zoo.h"

namespace kiln {
namespace {

struct DigitsRun {
  Dataset train, test;
  DigitsRun() {
    const std::string dir = testing::shared_digits_dir();
    train = load_dataset(dir, "idx", true);
    test = load_dataset(dir, "idx", false);
  }
};

CompileOptions digits_compile() {
  CompileOptions c;
  c.batch = 64;
  c.optimizer.kind = OptimizerKind::SGD;
  c.optimizer.momentum = 0.9f;
  c.optimizer.nesterov = true;
  c.optimizer.weight_decay = 5e-4f;
  c.label_smoothing = 0.1f;
  return c;
}

TrainOptions digits_train(int epochs) {
  TrainOptions t;
  t.epochs = epochs;
  t.schedule.kind = ScheduleKind::Cosine;
  t.schedule.lr = 0.05f;
  t.augment.pad_crop = 1;
  t.seed = 1;
  return t;
}

TEST(TrainDigits, ReachesAtLeast985TestAccuracy) {
  DigitsRun data;
  Trainer trainer(zoo::digits_cnn(), digits_compile(), digits_train(30));
  const auto reports = trainer.fit(data.train, data.test);
  ASSERT_EQ(reports.size(), 30u);
  std::printf("digits: final loss %.5f, test accuracy %.4f\n", reports.back().train_loss, reports.back().test_accuracy);
  EXPECT_GE(reports.back().test_accuracy, 0.985);
  EXPECT_LT(reports.back().train_loss, reports.front().train_loss);
  EXPECT_DOUBLE_EQ(trainer.evaluate(data.test), reports.back().test_accuracy);
}

TEST(TrainDigits, SameSeedSameLossAndResumeContinuesExactly) {
  DigitsRun data;
  auto run = [&] {
    Trainer trainer(zoo::digits_cnn(), digits_compile(), digits_train(2));
    return trainer.fit(data.train, data.test);
  };
  const auto a = run();
  const auto b = run();
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a.back().train_loss, b.back().train_loss);  // bitwise: same seed, same machine
  EXPECT_EQ(a.back().test_accuracy, b.back().test_accuracy);

  // Straight through, keeping a copy of the checkpoint written after the first epoch.
  namespace fs = std::filesystem;
  // A folder of this process's own: a file left by an earlier, crashed run would be refused
  // (an existing checkpoint needs resume or overwrite).
  const fs::path dir = fs::temp_directory_path() / ("kiln_resume_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string ckpt = (dir / "run.safetensors").string(), after_one = (dir / "epoch1.safetensors").string();
  TrainOptions t = digits_train(2);
  t.checkpoint = ckpt;
  Trainer straight(zoo::digits_cnn(), digits_compile(), t);
  const auto full = straight.fit(data.train, data.test, {}, [&](const EpochReport& r) {
    if (r.epoch == 0) fs::copy_file(ckpt, after_one, fs::copy_options::overwrite_existing);
  });
  EXPECT_EQ(full.back().train_loss, a.back().train_loss);  // checkpointing changes nothing
  // Resume from the first epoch's checkpoint: the second epoch is the same, bit for bit.
  t.checkpoint = after_one, t.resume = true;
  Trainer resumed(zoo::digits_cnn(), digits_compile(), t);
  const auto rest = resumed.fit(data.train, data.test);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].epoch, 1);
  EXPECT_EQ(rest[0].train_loss, full.back().train_loss);
  EXPECT_EQ(rest[0].test_accuracy, full.back().test_accuracy);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln

// End to end on the real digits: the README's configuration (scripts/demo.sh) reaches its accuracy on any CPU,
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
  c.optimizer.name = "sgd";
  c.optimizer.set("momentum", 0.9);
  c.optimizer.set("nesterov", 1);
  c.optimizer.set("weight_decay", 5e-4);
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

// The README's recipe (30 epochs, seed 1) trains the digits CNN to its accuracy on any x86-64 CPU
// and either copy of the digits (../shared's, or the one scripts/setup.sh makes, in another order,
// which the tests read where ../shared is missing). Measured (docs/results.md, "The digits test's
// bound"), test accuracy on the 1,000 test digits, kiln train with this recipe:
//   ../shared's digits, seeds 1-6 (x86-64-v2 build):  0.987 0.989 0.985 0.986 0.987 0.989
//   the same, seeds 1-3, -march=native (AVX-512):     0.987 0.989 0.985 (the same losses to 4
//                                                      digits every epoch: the ISA moves nothing here)
//   setup's digits, seeds 1-4 (x86-64-v2):            0.983 0.985 0.986 0.987
// The old bound, 0.985, failed a correct build on setup's copy (0.983 for seed 1, also the number
// reported from an AMD EPYC machine). A correct run lands in 0.983-0.989, mean 0.986, sd 0.002
// over these runs (one run's binomial sd on 1,000 digits is 0.0037). The bound, 0.978, is 0.5
// points under the lowest measured and ~4 sd under the mean; the two checks after it show it still
// rejects broken models: the same network after 2 of its 30 epochs (a run whose learning stalls:
// 0.953 measured on an Ice Lake-class Xeon, native AVX-512 build; after 3 epochs that machine gave
// 0.978, on the bound, where the machines above gave 0.972, so 3 epochs proved too close) and the
// trained network with BatchNorm's running statistics never updated (evaluation with mean 0,
// variance 1: 0.100) both fall under it.
constexpr double kDigitsBound = 0.978;

TEST(TrainDigits, ReachesTheRecipesAccuracyOnAnyCpu) {
  DigitsRun data;
  Trainer trainer(zoo::digits_cnn(), digits_compile(), digits_train(30));
  const auto reports = trainer.fit(data.train, data.test);
  ASSERT_EQ(reports.size(), 30u);
  std::printf("digits: final loss %.5f, test accuracy %.4f (after 2 epochs %.4f)\n", reports.back().train_loss,
              reports.back().test_accuracy, reports[1].test_accuracy);
  EXPECT_GE(reports.back().test_accuracy, kDigitsBound);
  EXPECT_LT(reports.back().train_loss, reports.front().train_loss);
  EXPECT_DOUBLE_EQ(trainer.evaluate(data.test), reports.back().test_accuracy);

  // The bound is not vacuous: a run that stopped learning after 2 epochs fails it ...
  EXPECT_LT(reports[1].test_accuracy, kDigitsBound);
  // ... and so does the trained network evaluated with BatchNorm statistics that were never kept.
  Executable& exe = trainer.executable();
  int reset = 0;
  for (int id : exe.program().buffers) {
    const TensorSpec& t = exe.program().tensors[id];
    const bool mean = t.name.ends_with(".running_mean"), var = t.name.ends_with(".running_var");
    if (!mean && !var) continue;
    ASSERT_EQ(t.dtype, DType::F32) << t.name;
    const std::vector<float> value(size_t(numel(t.shape)), mean ? 0.f : 1.f);
    exe.write(id, value.data(), value.size() * sizeof(float));
    ++reset;
  }
  ASSERT_GT(reset, 0);
  const double untracked = trainer.evaluate(data.test);
  std::printf("digits: with BatchNorm's running statistics at their initial values: test accuracy %.4f\n", untracked);
  EXPECT_LT(untracked, kDigitsBound);
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

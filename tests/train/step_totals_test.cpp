// The trainer keeps each epoch's loss and hits on the device and reads them only when it reports
// (TrainOptions::report_seconds): how often it reads changes nothing it reports.
#include <gtest/gtest.h>

#include <vector>

#include "support/cpu_test_util.h"
#include "train/tiny_run.h"

namespace kiln {
namespace {

using testing::expect_error;
using testing::tiny_compile;
using testing::tiny_dataset;
using testing::tiny_model;
using testing::tiny_train;

struct TrainingRun {
  std::vector<EpochReport> epochs;
  std::vector<StepReport> steps;
};

TrainingRun fit_reading_every(double report_seconds) {
  TrainOptions t = tiny_train(2);
  t.report_seconds = report_seconds;
  Trainer trainer(tiny_model(), tiny_compile(), t);
  TrainingRun run;
  run.epochs = trainer.fit(tiny_dataset(), tiny_dataset(30, 9), [&](const StepReport& s) { run.steps.push_back(s); });
  return run;
}

TEST(StepTotals, ReadingAfterEveryStepOrOnlyAtTheEndsReportsTheSameEpochs) {
  const TrainingRun every = fit_reading_every(0), ends = fit_reading_every(1e9);
  // 64 images at batch 16: 4 steps an epoch, each reported when reading after every step...
  ASSERT_EQ(every.steps.size(), 8u);
  for (size_t i = 0; i < every.steps.size(); ++i) EXPECT_EQ(every.steps[i].step_in_epoch, int64_t(i % 4) + 1);
  // ...and only each epoch's first and last when the interval never passes.
  ASSERT_EQ(ends.steps.size(), 4u);
  EXPECT_EQ(ends.steps[0].step_in_epoch, 1);
  EXPECT_EQ(ends.steps[1].step_in_epoch, 4);
  ASSERT_EQ(every.epochs.size(), 2u);
  ASSERT_EQ(ends.epochs.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(every.epochs[e].train_loss, ends.epochs[e].train_loss);
    EXPECT_EQ(every.epochs[e].train_accuracy, ends.epochs[e].train_accuracy);
    EXPECT_EQ(every.epochs[e].test_accuracy, ends.epochs[e].test_accuracy);
    // The epoch's loss is the mean of its steps' losses: the running mean at the last step.
    EXPECT_DOUBLE_EQ(every.steps[e * 4 + 3].loss, every.epochs[e].train_loss);
    EXPECT_DOUBLE_EQ(ends.steps[e * 2 + 1].loss, ends.epochs[e].train_loss);
    // The first report is the first step's loss alone; the runs start from the same weights.
    EXPECT_EQ(every.steps[e * 4].loss, ends.steps[e * 2].loss);
  }
  EXPECT_GT(every.epochs[0].train_loss, every.epochs[1].train_loss);  // it learned: the totals are real
  EXPECT_GT(every.epochs[1].train_accuracy, 1.0 / 3);
}

TEST(StepTotals, ABadReportIntervalIsAnErrorNamingIt) {
  TrainOptions t = tiny_train(1);
  t.report_seconds = -1;
  expect_error([&] { Trainer(tiny_model(), tiny_compile(), t); }, {"report_seconds", "-1", ">= 0"});
}

}  // namespace
}  // namespace kiln

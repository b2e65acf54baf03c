// A test set that fails to load after an epoch has trained never costs that epoch: fit writes the
// epoch's checkpoint and reports the epoch (EpochReport::eval_error) before it throws, and a run
// resumed from that checkpoint continues from the epoch, not from the start.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include "kiln/error.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"
#include "train/tiny_run.h"

namespace kiln {
namespace {

using testing::TempDir;
using testing::tiny_compile;
using testing::tiny_dataset;
using testing::tiny_model;
using testing::tiny_train;

// The tiny data set whose sample `bad` cannot be read from the `fail_from`-th read of it on, as a
// file that is deleted or damaged while the run goes.
class FailingSource : public DatasetSource {
 public:
  FailingSource(const Dataset& d, int64_t bad, int fail_from) : DatasetSource(d), bad_(bad), fail_from_(fail_from) {}
  int32_t write_sample(int64_t index, uint64_t seed, int epoch, uint8_t* out) const override {
    if (index == bad_ && reads_.fetch_add(1) + 1 >= fail_from_)
      fail("image file 'val/cat/{}.png' cannot be decoded: IDAT: CRC error", index);
    return DatasetSource::write_sample(index, seed, epoch, out);
  }

 private:
  int64_t bad_;
  int fail_from_;
  mutable std::atomic<int> reads_{0};
};

TEST(EvaluationFailure, TheEpochsCheckpointAndReportAreWrittenBeforeTheRunStops) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  const Dataset train = tiny_dataset(64, 5), test_data = tiny_dataset(32, 9);
  const FailingSource test(test_data, 7, 2);  // the first evaluation reads it; the second fails
  std::vector<EpochReport> reports;
  std::string message;
  {
    Trainer trainer(tiny_model(), tiny_compile(), tiny_train(3, ckpt));
    try {
      trainer.fit(DatasetSource(train), test, {}, [&](const EpochReport& r) { reports.push_back(r); });
    } catch (const Error& e) {
      message = e.what();
    }
  }
  // Epoch 1 evaluated; epoch 2 trained, was saved and reported, and its evaluation failed.
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_TRUE(reports[0].eval_error.empty());
  EXPECT_GT(reports[0].test_accuracy, 0.0);
  EXPECT_NE(reports[1].eval_error.find("val/cat/7.png"), std::string::npos) << reports[1].eval_error;
  EXPECT_NE(message.find("the evaluation on the test set after epoch 2/3 failed"), std::string::npos) << message;
  EXPECT_NE(message.find("val/cat/7.png"), std::string::npos) << message;
  EXPECT_NE(message.find("holds epoch 2"), std::string::npos) << message;
  ASSERT_TRUE(std::filesystem::exists(ckpt));

  // The checkpoint holds the trained epoch 2: a resumed run starts at epoch 3.
  TrainOptions t = tiny_train(3, ckpt);
  t.resume = true;
  Trainer resumed(tiny_model(), tiny_compile(), t);
  EXPECT_TRUE(resumed.resumed());
  EXPECT_EQ(resumed.resumed_epochs(), 2);
  const std::vector<EpochReport> rest = resumed.fit(DatasetSource(train), DatasetSource(test_data));
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].epoch, 2);
}

// Without a checkpoint path the error says the weights were not saved, rather than naming a file.
TEST(EvaluationFailure, WithoutACheckpointTheErrorSaysNothingWasSaved) {
  const Dataset train = tiny_dataset(64, 5), test_data = tiny_dataset(32, 9);
  const FailingSource test(test_data, 3, 1);
  Trainer trainer(tiny_model(), tiny_compile(), tiny_train(2));
  testing::expect_error([&] { trainer.fit(DatasetSource(train), test); },
                        {"after epoch 1/2 failed", "val/cat/3.png", "no checkpoint path was set"});
}

// One class cannot be learned: refused before the first step, whatever the format.
TEST(ClassCount, OneClassIsRefusedBeforeTraining) {
  Dataset one = tiny_dataset(64, 5);
  for (int32_t& l : one.labels) l = 0;
  one.num_classes = 1;
  Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1));
  testing::expect_error([&] { trainer.fit(one, Dataset{}); },
                        {"the training set holds 1 class", "at least two classes"});
}

}  // namespace
}  // namespace kiln

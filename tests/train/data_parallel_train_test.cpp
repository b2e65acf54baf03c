// Data-parallel training through the Trainer, with ranks on threads of this process
// (support/thread_ranks.h; NCCL's group needs GPUs, where tests/gpu/data_parallel_gpu_test.cpp runs
// the same comparison on two). Two ranks training batch B/2 each must follow one process training
// batch B: each rank takes its half of every global batch (the loaders' shards), the backward's
// gradient buckets are averaged, the totals are combined, and rank 0 alone writes the checkpoint.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "kiln/checkpoint.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "train/tiny_run.h"

namespace kiln {
namespace {

using testing::TempDir;
using testing::ThreadRanks;
using testing::tiny_dataset;
using testing::tiny_train;

// tiny_model without BatchNorm: BatchNorm's statistics come from each rank's own rows (as in
// PyTorch's DistributedDataParallel), so only a model without it computes the same function on two
// ranks as in one process.
Blueprint no_batch_norm() {
  Blueprint m("tiny_no_bn");
  m.input(8, 8, 1).conv(4, 3, 1, 1, true, "conv1").relu("relu1").maxpool(2, 2, 0, "pool1");
  m.flatten("flatten").fc(3, true, "fc");
  return m;
}

CompileOptions options(int batch, std::shared_ptr<ProcessGroup> group = nullptr) {
  CompileOptions c;
  c.batch = batch;
  c.optimizer.name = "sgd";
  c.optimizer.set("momentum", 0.9).set("weight_decay", 1e-4);
  c.data_parallel = std::move(group);
  return c;
}

std::vector<float> params(Trainer& t) {
  const Program& p = t.executable().program();
  std::vector<float> v(p.tensors[size_t(p.param_region)].bytes() / sizeof(float));
  t.executable().read(p.param_region, v.data(), v.size() * sizeof(float));
  return v;
}

struct RankRun {
  std::vector<EpochReport> reports;
  std::vector<float> weights;
  std::optional<Stopped> stopped;
  std::exception_ptr error;
};

// Trains `ranks` ranks on threads, each with `train` (its stop flag, if any, from `stops`).
std::vector<RankRun> train_ranks(int ranks, int batch, const TrainOptions& train, const Dataset& data,
                                 const Dataset& test, std::vector<std::atomic<bool>>* stops = nullptr) {
  ThreadRanks group(ranks);
  std::vector<RankRun> runs(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      RankRun& run = runs[size_t(r)];
      try {
        TrainOptions t = train;
        if (stops) t.stop = &(*stops)[size_t(r)];
        Trainer trainer(no_batch_norm(), options(batch, group.rank(r)), t);
        try {
          run.reports = trainer.fit(data, test);
        } catch (const Stopped& s) {
          run.stopped = s;
        }
        run.weights = params(trainer);
      } catch (...) {
        run.error = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (RankRun& run : runs)
    if (run.error) std::rethrow_exception(run.error);
  return runs;
}

TEST(DataParallelTrain, TwoRanksFollowOneProcessTrainingTheWholeBatch) {
  const Dataset data = tiny_dataset(256), test = tiny_dataset(30, 9);
  TempDir dir;
  const std::string ckpt = (dir.path() / "run.safetensors").string();
  TrainOptions train = tiny_train(3, ckpt);  // 8 global batches of 32 an epoch
  const std::vector<RankRun> ranks = train_ranks(2, 16, train, data, test);

  Trainer whole(no_batch_norm(), options(32), tiny_train(3));
  const std::vector<EpochReport> reference = whole.fit(data, test);
  Trainer half(no_batch_norm(), options(16), tiny_train(3));  // every second batch's rows missing
  half.fit(data, test);

  // The ranks agree on everything they report and hold the same weights, bit for bit.
  ASSERT_EQ(ranks[0].reports.size(), 3u);
  for (size_t e = 0; e < 3; ++e) {
    EXPECT_EQ(ranks[0].reports[e].train_loss, ranks[1].reports[e].train_loss);
    EXPECT_EQ(ranks[0].reports[e].train_accuracy, ranks[1].reports[e].train_accuracy);
    EXPECT_EQ(ranks[0].reports[e].test_accuracy, ranks[1].reports[e].test_accuracy);
  }
  EXPECT_EQ(ranks[0].weights, ranks[1].weights);
  // Against one process: each gradient is the mean of two 16-row means instead of one 32-row mean,
  // the same fp32 products added in another order: a few 2^-24 relative per sum. 24 SGD steps at
  // lr 0.05 on this small model carry that along without growing it much, so 1e-5 of the largest
  // weight leaves a wide margin; training on half the rows moves the weights by ~1e-2.
  constexpr double kBound = 1e-5;
  const std::vector<float> w_whole = params(whole);
  EXPECT_LT(testing::rel_err(ranks[0].weights, w_whole), kBound);
  EXPECT_GT(testing::rel_err(params(half), w_whole), 100 * kBound) << "the bound must tell half the batch apart";
  for (size_t e = 0; e < 3; ++e) {
    EXPECT_NEAR(ranks[0].reports[e].train_loss, reference[e].train_loss, kBound * reference[e].train_loss) << e;
    EXPECT_EQ(ranks[0].reports[e].train_accuracy, reference[e].train_accuracy) << e;
    EXPECT_EQ(ranks[0].reports[e].test_accuracy, reference[e].test_accuracy) << e;
  }
  // Rank 0 wrote the checkpoint (rank 1 neither wrote nor locked it), recording the rank count.
  const SafetensorsFile file = load_safetensors(ckpt);
  EXPECT_EQ(file.metadata.at("ranks"), "2");
  EXPECT_EQ(file.metadata.at("epochs_done"), "3");
}

TEST(DataParallelTrain, AStopAskedOfOneRankStopsEveryRankAtTheSameStep) {
  const Dataset data = tiny_dataset(256), test = tiny_dataset(30, 9);
  std::vector<std::atomic<bool>> stops(2);
  stops[1] = true;  // only rank 1 is asked (a signal that reached one process)
  const std::vector<RankRun> ranks = train_ranks(2, 16, tiny_train(3), data, test, &stops);
  for (const RankRun& r : ranks) {
    ASSERT_TRUE(r.stopped.has_value());
    EXPECT_EQ(r.stopped->epoch, 0);
    EXPECT_EQ(r.stopped->step, 1);  // agreed at the first read, after the first step
  }
  EXPECT_EQ(ranks[0].weights, ranks[1].weights);
}

TEST(DataParallelTrain, ResumingOnAnotherRankCountContinuesFromTheEpochsDone) {
  const Dataset data = tiny_dataset(256), test = tiny_dataset(30, 9);
  TempDir dir;
  const std::string ckpt = (dir.path() / "run.safetensors").string();
  train_ranks(2, 16, tiny_train(1, ckpt), data, test);  // one epoch on two ranks: 8 steps of 32
  TrainOptions more = tiny_train(2, ckpt);
  more.resume = true;
  Trainer alone(no_batch_norm(), options(16), more);  // one rank of batch 16: 16 steps an epoch
  ASSERT_TRUE(alone.resumed());
  EXPECT_EQ(alone.resumed_ranks(), 2);
  EXPECT_EQ(alone.ranks(), 1);
  const std::vector<EpochReport> reports = alone.fit(data, test);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].epoch, 1);
  // The schedule continues from the second epoch's start (cosine over 2 epochs of 16 steps).
  EXPECT_NEAR(reports[0].lr, more.schedule.at(16, 16, 2), 1e-9);
}

}  // namespace
}  // namespace kiln

// One seed gives one result whatever the thread count: a short digits training (the README's
// recipe: CBR layers, pooling, dropout, label smoothing, random crops, SGD with Nesterov) with 1,
// 2 and 3 threads writes byte-identical checkpoints. Every kernel cuts its work by the problem
// size, never by the thread count, and adds partial results in a fixed order.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln/threads.h"
#include "kiln/trainer.h"
#include "kiln/zoo.h"
#include "support/program_fixture.h"
#include "support/scoped_threads.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

// The first `count` samples of `d`: ten steps of batch 64 keep three trainings short.
Dataset first(const Dataset& d, int64_t count) {
  Dataset out = d;
  out.count = std::min(count, d.count);
  out.images.resize(size_t(out.count * d.image_size()));
  out.labels.resize(size_t(out.count));
  return out;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Trained {
  double loss = 0;
  std::string checkpoint;
};

Trained train_with_threads(int threads, const Dataset& train, const Dataset& test, const std::string& path) {
  testing::ScopedThreads scope(threads);
  CompileOptions c;
  c.batch = 64;
  c.optimizer.set("momentum", 0.9);
  c.optimizer.set("nesterov", 1);
  c.optimizer.set("weight_decay", 5e-4);
  c.label_smoothing = 0.1f;
  TrainOptions t;
  t.epochs = 1;
  t.schedule.lr = 0.05f;
  t.augment.pad_crop = 1;
  t.seed = 3;
  t.checkpoint = path;
  Trainer trainer(zoo::digits_cnn(), c, t);
  const auto reports = trainer.fit(train, test);
  return {reports.empty() ? 0.0 : reports.back().train_loss, file_bytes(path)};
}

TEST(ThreadCount, OneTwoAndThreeThreadsTrainTheSameBytes) {
  const std::string dir = testing::shared_digits_dir();
  const Dataset train = first(load_dataset(dir, "idx", true), 640);
  const Dataset test = first(load_dataset(dir, "idx", false), 128);
  testing::TempDir tmp;
  const Trained one = train_with_threads(1, train, test, tmp.file("t1.safetensors"));
  ASSERT_FALSE(one.checkpoint.empty());
  for (int threads : {2, 3}) {
    const Trained many = train_with_threads(threads, train, test, tmp.file(fmt::format("t{}.safetensors", threads)));
    EXPECT_EQ(many.loss, one.loss) << threads << " threads";
    EXPECT_TRUE(many.checkpoint == one.checkpoint)
        << "the checkpoint trained with " << threads << " threads differs from the one trained with 1";
  }
}

}  // namespace
}  // namespace kiln

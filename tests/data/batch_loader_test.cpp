#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "support/temp_dir.h"
#include "kiln/data.h"
#include "kiln/error.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::error_of;

// Random pixels; label i = sample index, so a batch reveals which samples it holds.
Dataset random_dataset(int64_t n, int64_t h, int64_t w, int64_t c, uint32_t seed) {
  std::mt19937 rng(seed);
  Dataset ds;
  ds.count = n;
  ds.height = h;
  ds.width = w;
  ds.channels = c;
  ds.num_classes = int(n);
  for (int64_t i = 0; i < n * h * w * c; ++i) ds.images.push_back(uint8_t(rng()));
  for (int64_t i = 0; i < n; ++i) ds.labels.push_back(int32_t(i));
  return ds;
}

// Reference: pixel (y, x) of sample `index` cropped at offset (dy, dx) from the zero-padded
// image, optionally mirrored, then normalized — all in double.
double reference_pixel(const Dataset& ds, int64_t index, int64_t y, int64_t x, int64_t c,
                       int dy, int dx, bool flip, const std::vector<float>& mean,
                       const std::vector<float>& std) {
  int64_t sx = (flip ? ds.width - 1 - x : x) + dx, sy = y + dy;
  double pixel = 0.0;
  if (sy >= 0 && sy < ds.height && sx >= 0 && sx < ds.width)
    pixel = ds.images[((index * ds.height + sy) * ds.width + sx) * ds.channels + c];
  return (pixel / 255.0 - double(mean[c])) / double(std[c]);
}

bool sample_matches(const Dataset& ds, const float* out, int64_t index, int dy, int dx, bool flip,
                    const std::vector<float>& mean, const std::vector<float>& std) {
  for (int64_t y = 0; y < ds.height; ++y)
    for (int64_t x = 0; x < ds.width; ++x)
      for (int64_t c = 0; c < ds.channels; ++c) {
        double ref = reference_pixel(ds, index, y, x, c, dy, dx, flip, mean, std);
        double got = out[((y * ds.width) + x) * ds.channels + c];
        if (std::abs(got - ref) > 1e-5 * (1.0 + std::abs(ref))) return false;
      }
  return true;
}

std::vector<Batch> whole_epoch(BatchLoader& loader, int epoch) {
  loader.start_epoch(epoch);
  std::vector<Batch> batches;
  Batch b;
  while (loader.next(b)) batches.push_back(b);
  EXPECT_FALSE(loader.next(b));  // stays exhausted
  return batches;
}

const std::vector<float> kMean{0.3f, 0.6f}, kStd{0.2f, 0.45f};

TEST(BatchLoader, PlainBatchesMatchReferenceAndPadTheLastOne) {
  Dataset ds = random_dataset(10, 3, 4, 2, 21);
  BatchLoader loader(ds, 4, false, false, Augment{}, kMean, kStd, 5);
  ASSERT_EQ(loader.batches_per_epoch(), 3);
  auto batches = whole_epoch(loader, 0);
  ASSERT_EQ(batches.size(), 3u);
  const int64_t floats = 3 * 4 * 2;
  for (int b = 0; b < 3; ++b) {
    const Batch& batch = batches[b];
    ASSERT_EQ(batch.images.size(), size_t(4 * floats));
    ASSERT_EQ(batch.labels.size(), 4u);
    EXPECT_EQ(batch.size, b < 2 ? 4 : 2);
    for (int64_t i = 0; i < batch.size; ++i) {
      EXPECT_EQ(batch.labels[i], b * 4 + i);
      EXPECT_TRUE(sample_matches(ds, batch.images.data() + i * floats, b * 4 + i, 0, 0, false, kMean, kStd));
    }
  }
  for (int64_t i = 2; i < 4; ++i) {  // padding
    EXPECT_EQ(batches[2].labels[i], 0);
    for (int64_t k = 0; k < floats; ++k) ASSERT_EQ(batches[2].images[i * floats + k], 0.0f);
  }
}

TEST(BatchLoader, DropLastSkipsThePartialBatch) {
  Dataset ds = random_dataset(10, 2, 2, 1, 22);
  BatchLoader loader(ds, 4, true, true, Augment{}, {}, {}, 5);
  EXPECT_EQ(loader.batches_per_epoch(), 2);
  auto batches = whole_epoch(loader, 3);
  ASSERT_EQ(batches.size(), 2u);
  for (const Batch& b : batches) EXPECT_EQ(b.size, 4);
  BatchLoader exact(ds, 5, false, true, Augment{}, {}, {}, 5);
  EXPECT_EQ(exact.batches_per_epoch(), 2);
}

TEST(BatchLoader, EpochPermutationIsAPureFunctionOfSeedAndEpoch) {
  std::vector<int64_t> p = epoch_permutation(1000, 7, 2);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(p, epoch_permutation(1000, 7, 2));
  EXPECT_NE(p, epoch_permutation(1000, 7, 3));
  EXPECT_NE(p, epoch_permutation(1000, 8, 2));
  EXPECT_TRUE(epoch_permutation(0, 7, 0).empty());
}

TEST(BatchLoader, ShuffledEpochFollowsThePermutation) {
  Dataset ds = random_dataset(23, 2, 3, 2, 23);
  BatchLoader loader(ds, 5, true, false, Augment{}, kMean, kStd, 99);
  for (int epoch : {0, 1}) {
    auto order = epoch_permutation(23, 99, epoch);
    auto batches = whole_epoch(loader, epoch);
    ASSERT_EQ(batches.size(), 5u);
    for (int64_t j = 0; j < 23; ++j) {
      const Batch& b = batches[j / 5];
      ASSERT_EQ(b.labels[j % 5], order[j]);
      EXPECT_TRUE(sample_matches(ds, b.images.data() + (j % 5) * 12, order[j], 0, 0, false, kMean, kStd));
    }
  }
}

TEST(BatchLoader, AugmentationIsAPaddedCropAndFlipOfTheSource) {
  Dataset ds = random_dataset(60, 6, 5, 2, 24);
  const int pad = 2;
  BatchLoader loader(ds, 16, true, false, Augment{pad, true}, kMean, kStd, 3);
  std::set<std::pair<int, int>> offsets_seen;
  int flips = 0, samples = 0;
  for (int epoch = 0; epoch < 8; ++epoch)
    for (const Batch& b : whole_epoch(loader, epoch))
      for (int64_t i = 0; i < b.size; ++i) {
        const float* img = b.images.data() + i * 60;
        bool found = false;
        for (int dy = -pad; dy <= pad && !found; ++dy)
          for (int dx = -pad; dx <= pad && !found; ++dx)
            for (bool flip : {false, true})
              if (sample_matches(ds, img, b.labels[i], dy, dx, flip, kMean, kStd)) {
                found = true;
                offsets_seen.insert({dy, dx});
                flips += flip;
                break;
              }
        ASSERT_TRUE(found) << "sample " << b.labels[i] << " epoch " << epoch;
        ++samples;
      }
  EXPECT_EQ(samples, 480);
  EXPECT_EQ(offsets_seen.size(), 25u);  // every crop position occurs
  EXPECT_GT(flips, samples * 0.4);
  EXPECT_LT(flips, samples * 0.6);
}

TEST(BatchLoader, AugmentationDependsOnSampleNotPosition) {
  Dataset ds = random_dataset(20, 4, 4, 2, 25);
  Augment aug{1, true};
  BatchLoader ordered(ds, 20, false, false, aug, kMean, kStd, 4);
  BatchLoader shuffled(ds, 7, true, false, aug, kMean, kStd, 4);
  Batch a = whole_epoch(ordered, 5)[0];
  for (const Batch& b : whole_epoch(shuffled, 5))
    for (int64_t i = 0; i < b.size; ++i)
      for (int k = 0; k < 32; ++k) ASSERT_EQ(b.images[i * 32 + k], a.images[b.labels[i] * 32 + k]);
}

TEST(BatchLoader, ResultsDoNotDependOnWorkersOrPrefetch) {
  Dataset ds = random_dataset(101, 8, 8, 2, 26);
  auto run = [&](int workers, int prefetch) {
    BatchLoader loader(ds, 8, true, false, Augment{3, true}, kMean, kStd, 42, workers, prefetch);
    std::vector<Batch> all = whole_epoch(loader, 0);
    for (Batch& b : whole_epoch(loader, 1)) all.push_back(b);
    return all;
  };
  std::vector<Batch> ref = run(0, 1);
  ASSERT_EQ(ref.size(), 26u);
  for (auto [workers, prefetch] : {std::pair{1, 1}, {2, 4}, {3, 2}, {8, 8}, {5, 30}}) {
    std::vector<Batch> got = run(workers, prefetch);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(got[i].images, ref[i].images) << workers << " workers, batch " << i;
      ASSERT_EQ(got[i].labels, ref[i].labels);
      ASSERT_EQ(got[i].size, ref[i].size);
    }
  }
}

TEST(BatchLoader, RestartAndDestroyMidEpoch) {
  Dataset ds = random_dataset(400, 16, 16, 3, 27);
  std::vector<float> mean{0.5f, 0.5f, 0.5f}, std{0.25f, 0.25f, 0.25f};
  for (int round = 0; round < 20; ++round) {
    BatchLoader loader(ds, 4, true, false, Augment{4, true}, mean, std, 1, 4, 3);
    loader.start_epoch(0);
    Batch b;
    ASSERT_TRUE(loader.next(b));
    loader.start_epoch(1);  // abandons epoch 0
    int64_t count = 0;
    while (loader.next(b)) ++count;
    EXPECT_EQ(count, 100);
    loader.start_epoch(2);
    ASSERT_TRUE(loader.next(b));
    // The destructor runs here with workers still building epoch 2.
  }
  BatchLoader never_read(ds, 4, true, false, Augment{}, {}, {}, 1, 4, 3);
  never_read.start_epoch(0);
}

TEST(BatchLoader, RejectsBadArguments) {
  Dataset ds = random_dataset(10, 2, 2, 2, 28);
  EXPECT_NE(error_of([&] { BatchLoader(ds, 0, false, false, {}, {}, {}, 1); }).find("batch size"), std::string::npos);
  EXPECT_NE(error_of([&] { BatchLoader(ds, -3, false, false, {}, {}, {}, 1); }).find("-3"), std::string::npos);
  EXPECT_NE(error_of([&] { BatchLoader(ds, 2, false, false, {}, {0.5f}, {0.5f}, 1); }).find("2 channels"), std::string::npos);
  EXPECT_NE(error_of([&] { BatchLoader(ds, 2, false, false, {}, {0.5f, 0.5f}, {0.5f, 0.0f}, 1); }).find("channel 1"), std::string::npos);
  EXPECT_NE(error_of([&] { BatchLoader(ds, 2, false, false, Augment{-1, false}, {}, {}, 1); }).find("pad_crop"), std::string::npos);
  EXPECT_NE(error_of([&] { BatchLoader(ds, 2, false, false, {}, {}, {}, 1, 2, 0); }).find("prefetch"), std::string::npos);
  BatchLoader loader(ds, 2, false, false, {}, {}, {}, 1);
  Batch b;
  EXPECT_NE(error_of([&] { loader.next(b); }).find("start_epoch"), std::string::npos);
}

TEST(ChannelStats, MatchesNaiveDoubleComputation) {
  Dataset ds = random_dataset(30, 5, 4, 3, 29);
  ChannelStats stats = compute_channel_stats(ds);
  ASSERT_EQ(stats.mean.size(), 3u);
  for (int c = 0; c < 3; ++c) {
    double sum = 0, sq = 0;
    int64_t n = 0;
    for (size_t i = c; i < ds.images.size(); i += 3, ++n) sum += ds.images[i] / 255.0;
    double mean = sum / n;
    for (size_t i = c; i < ds.images.size(); i += 3) sq += std::pow(ds.images[i] / 255.0 - mean, 2);
    EXPECT_NEAR(stats.mean[c], mean, 1e-6);
    EXPECT_NEAR(stats.std[c], std::sqrt(sq / n), 1e-6);
  }
  EXPECT_THROW(compute_channel_stats(Dataset{}), Error);
}

}  // namespace
}  // namespace kiln

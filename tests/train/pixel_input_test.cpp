// Batches as uint8 pixels normalized by the executable (what a GPU trainer sends): the input
// tensor holds exactly the floats the loader's own normalization gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kiln/compile.h"
#include "kiln/data.h"
#include "kiln/executable.h"
#include "kiln/zoo.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

Dataset random_digits(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Dataset ds;
  ds.count = n, ds.height = ds.width = 20, ds.channels = 1, ds.num_classes = 10;
  for (int64_t i = 0; i < n * 400; ++i) ds.images.push_back(uint8_t(rng()));
  for (int64_t i = 0; i < n; ++i) ds.labels.push_back(int32_t(rng() % 10));
  return ds;
}

TEST(PixelInput, PixelsNormalizedByTheExecutableEqualTheLoadersFloats) {
  const Dataset ds = random_digits(10, 3);
  const std::vector<float> mean{0.13f}, std{0.31f};
  BatchLoader floats(ds, 4, true, false, Augment{1, true}, mean, std, 7, 0);
  BatchLoader bytes(ds, 4, true, false, Augment{1, true}, mean, std, 7, 0);
  bytes.deliver_pixels(true);
  CompileOptions c;
  c.batch = 4;
  Executable exe(compile(zoo::digits_cnn(), c), 1);
  const int input = exe.program().input;
  floats.start_epoch(2);
  bytes.start_epoch(2);
  Batch a, b;
  int batches = 0;
  while (floats.next(a)) {
    ASSERT_TRUE(bytes.next(b));
    EXPECT_TRUE(b.images.empty());
    ASSERT_EQ(b.pixels.size(), a.images.size());
    EXPECT_EQ(b.labels, a.labels);
    EXPECT_EQ(b.size, a.size);
    exe.write_pixels_ordered(input, b.pixels.data(), b.pixels.size(), bytes.normalization_scale(),
                             bytes.normalization_bias());
    // Bit for bit over the real rows; a partial batch's padding rows (never counted: their labels
    // are -1 in evaluation, and training drops partial batches) hold pixel 0 normalized.
    const std::vector<float> written = exe.read<float>(input);
    const size_t real = size_t(b.size) * 400;
    EXPECT_TRUE(std::equal(written.begin(), written.begin() + real, a.images.begin())) << "batch " << batches;
    ++batches;
  }
  EXPECT_EQ(batches, 3);
  EXPECT_FALSE(bytes.next(b));
}

TEST(PixelInput, BadArgumentsNameTheTensor) {
  CompileOptions c;
  c.batch = 2;
  Executable exe(compile(zoo::digits_cnn(), c), 1);
  const int input = exe.program().input, label = exe.program().label;
  std::vector<uint8_t> px(2 * 400, 9);
  testing::expect_error([&] { exe.write_pixels_ordered(input, px.data(), px.size(), {1.f, 1.f}, {0.f}); },
                        {"scales", "biases"});
  testing::expect_error([&] { exe.write_pixels_ordered(input, px.data(), px.size() - 1, {1.f}, {0.f}); },
                        {"bytes", "holds"});
  testing::expect_error([&] { exe.write_pixels_ordered(label, px.data(), 2, {1.f}, {0.f}); }, {"F32 tensors only"});
}

}  // namespace
}  // namespace kiln

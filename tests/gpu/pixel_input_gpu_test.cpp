// Batches cross to the GPU as uint8 pixels and are normalized there: the input tensor holds
// exactly the floats the host's loader gives (separately rounded multiply and add), for RGB
// ImageNet-style batches with odd byte counts and several staged batches in flight.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kiln/compile.h"
#include "kiln/data.h"
#include "kiln/executable.h"
#include "kiln/zoo.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

TEST(PixelInputGpu, PixelsNormalizedOnTheDeviceEqualTheLoadersFloats) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(5);
  Dataset ds;
  ds.count = 9, ds.height = 33, ds.width = 35, ds.channels = 3, ds.num_classes = 10;  // odd sizes: unaligned tails
  for (int64_t i = 0; i < ds.count * ds.image_size(); ++i) ds.images.push_back(uint8_t(rng()));
  for (int64_t i = 0; i < ds.count; ++i) ds.labels.push_back(int32_t(rng() % 10));
  const std::vector<float> mean{0.485f, 0.456f, 0.406f}, std{0.229f, 0.224f, 0.225f};
  BatchLoader floats(ds, 3, true, true, Augment{2, true}, mean, std, 4, 0);
  BatchLoader bytes(ds, 3, true, true, Augment{2, true}, mean, std, 4, 0);
  bytes.deliver_pixels(true);
  CompileOptions c;
  c.device = Device::CUDA;
  c.batch = 3;
  c.input_hwc = {33, 35, 3};
  Executable exe(compile(zoo::by_name("resnet18", 10), c), 1);
  const int input = exe.program().input;
  for (int epoch = 0; epoch < 2; ++epoch) {
    floats.start_epoch(epoch);
    bytes.start_epoch(epoch);
    Batch a, b;
    std::vector<Batch> expected;
    // Three batches staged back to back before any is read: the staging buffers rotate.
    while (floats.next(a)) {
      ASSERT_TRUE(bytes.next(b));
      exe.write_pixels_ordered(input, b.pixels.data(), b.pixels.size(), bytes.normalization_scale(),
                               bytes.normalization_bias());
      expected.push_back(a);
    }
    ASSERT_EQ(expected.size(), 3u);
    EXPECT_EQ(exe.read<float>(input), expected.back().images) << "epoch " << epoch;
  }
}

}  // namespace
}  // namespace kiln

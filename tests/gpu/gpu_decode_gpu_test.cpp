// The GPU decode path (--decode gpu) against the CPU path on the same real photos (setup's
// data/photos_tiny: baseline 4:2:0 and 4:4:4 JPEGs, plus gray, progressive and EXIF files the GPU
// hands to the CPU threads): the same samples in the same order with the same labels, crops and
// flips, pixels within the decoders' and resamplers' rounding; and the batch reaches the model's
// input through Executable::write_device_pixels_ordered exactly as the host would normalize it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "data/gpu_decode/gpu_decode_loader.h"
#include "kiln/compile.h"
#include "kiln/data.h"
#include "kiln/executable.h"
#include "kiln/image_folder.h"
#include "kiln/zoo.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

constexpr int kSide = 112, kBatch = 32;

std::string photos_dir() {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/data/photos_tiny/train";
  if (!std::filesystem::is_directory(dir))
    throw std::runtime_error(dir + " is missing: run scripts/setup.sh (it makes data/photos_tiny)");
  return dir;
}

std::unique_ptr<SampleSource> photos(bool dct_scaling) {
  ImageTransform t;
  t.size = kSide;
  // The CPU reference decodes at full scale, as nvJPEG does: DCT scaling is a different
  // (coarser) decode, not rounding.
  t.dct_scaling = dct_scaling;
  return open_image_folder(scan_image_folder(photos_dir()), t, true);
}

std::vector<uint8_t> to_host(const DevicePixels& px, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  if (cudaMemcpy(host.data(), px.data(), bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
    throw std::runtime_error("cudaMemcpy of the GPU batch failed");
  return host;
}

int64_t gpu_samples(const BatchStream& s) {
  std::smatch m;
  const std::string text = s.describe();
  if (!std::regex_search(text, m, std::regex("(\\d+) samples decoded on the GPU")))
    throw std::runtime_error("unexpected describe(): " + text);
  return std::stoll(m[1]);
}

TEST(GpuDecode, BatchesMatchTheCpuPathWithinRounding) {
  KILN_REQUIRE_GPU();
  auto source = photos(false);
  const int64_t sample = source->shape().size();
  BatchLoader cpu(*source, kBatch, true, true, {}, {}, 11, 4);
  cpu.deliver_pixels(true);
  GpuDecodeSettings g;
  // No CPU workers: the GPU takes every sample it can (the feeders decode the rest themselves).
  g.batch = kBatch, g.seed = 11, g.workers = 0;
  auto gpu = make_gpu_decode_loader(*source, g);
  double diff_sum = 0, mirrored_sum = 0;
  int64_t values = 0, far = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    cpu.start_epoch(epoch);
    gpu->start_epoch(epoch);
    Batch a, b;
    int batches = 0;
    while (cpu.next(a)) {
      ASSERT_TRUE(gpu->next(b));
      ASSERT_TRUE(b.device);
      b.device->wait_ready();
      const std::vector<uint8_t> px = to_host(*b.device, size_t(kBatch * sample));
      b.device->read_on(nullptr);
      ASSERT_EQ(a.labels, b.labels) << "epoch " << epoch << " batch " << batches;
      for (int64_t s = 0; s < kBatch; ++s)
        for (int64_t y = 0; y < kSide; ++y)
          for (int64_t x = 0; x < kSide; ++x)
            for (int64_t c = 0; c < 3; ++c) {
              const int64_t at = s * sample + (y * kSide + x) * 3 + c;
              const int64_t mirror = s * sample + (y * kSide + (kSide - 1 - x)) * 3 + c;
              const int d = std::abs(int(px[size_t(at)]) - int(a.pixels[size_t(at)]));
              diff_sum += d;
              far += d > 16;
              mirrored_sum += std::abs(int(px[size_t(mirror)]) - int(a.pixels[size_t(at)]));
              ++values;
            }
      ++batches;
    }
    EXPECT_FALSE(gpu->next(b));
    EXPECT_EQ(batches, 200 / kBatch);
  }
  const double diff = diff_sum / double(values), mirrored = mirrored_sum / double(values);
  const double far_share = double(far) / double(values);
  std::printf("GPU vs CPU decode: mean |diff| %.3f levels, %.4f%% of values off by > 16; the same against the "
              "mirrored sample %.2f; %s\n", diff, 100 * far_share, mirrored, gpu->describe().c_str());
  // The GPU must really have decoded them: 194 of the 200 files are 3-component JPEGs, all but a
  // few (progressive, EXIF) baseline.
  EXPECT_GE(gpu_samples(*gpu), int64_t(0.9 * 2 * (200 / kBatch) * kBatch));
  // nvJPEG's IDCT and chroma upsampling differ from libjpeg-turbo's by a level or two, and the
  // float one-pass resample from PIL's two 8-bit passes by about one: a mean of 1.5 levels leaves
  // room for both. A wrong crop, box or flip moves values by tens of levels: the mirrored
  // comparison shows the size of such an error, and must stay far above the bound.
  EXPECT_LT(diff, 1.5);
  EXPECT_LT(far_share, 0.002);
  EXPECT_GT(mirrored, 4 * 1.5);
}

TEST(GpuDecode, DevicePixelsReachTheInputAsTheHostWouldNormalizeThem) {
  KILN_REQUIRE_GPU();
  auto source = photos(true);
  const int64_t sample = source->shape().size();
  GpuDecodeSettings g;
  g.batch = kBatch, g.seed = 3, g.workers = 2;
  auto gpu = make_gpu_decode_loader(*source, g);
  CompileOptions c;
  c.device = Device::CUDA;
  c.batch = kBatch;
  c.input_hwc = {kSide, kSide, 3};
  Executable exe(compile(zoo::by_name("resnet18", 10), c), 1);
  const std::vector<float> scale{1 / (255 * 0.229f), 1 / (255 * 0.224f), 1 / (255 * 0.225f)};
  const std::vector<float> bias{-0.485f / 0.229f, -0.456f / 0.224f, -0.406f / 0.225f};
  gpu->start_epoch(0);
  Batch b;
  // Several batches written back to back: each buffer is reused only after its reads.
  std::vector<uint8_t> last;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(gpu->next(b));
    exe.write_device_pixels_ordered(exe.program().input, *b.device, size_t(kBatch * sample), scale, bias);
    if (i == 4) {
      exe.synchronize();
      last = to_host(*b.device, size_t(kBatch * sample));
    }
  }
  const std::vector<float> input = exe.read<float>(exe.program().input);
  ASSERT_EQ(input.size(), last.size());
  for (size_t i = 0; i < last.size(); ++i) {
    const volatile float scaled = float(last[i]) * scale[i % 3];
    ASSERT_EQ(input[i], scaled + bias[i % 3]) << "value " << i;
  }
}

}  // namespace
}  // namespace kiln

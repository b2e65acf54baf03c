// The concat family on the GPU: the channel copy against the host for F32, F16 and BF16 (bit for
// bit, and nothing outside the slice written), on row counts with a partial last block; and a CUDA
// program whose concat joins a branch, the data batch and the branch again, forward, backward and
// in inference, against values computed on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/concat/concat_cuda.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using namespace gpu_test;

TEST(ConcatGpu, CopyChannelsMatchesTheHostBitForBit) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(11);
  std::normal_distribution<double> normal;
  const int64_t src_c = 7, dst_c = 13, src_offset = 2, dst_offset = 5, channels = 4;
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (int64_t rows : {int64_t{1}, int64_t{63}, int64_t{1001}, int64_t{300007}}) {
      SCOPED_TRACE(std::string(name(dt)) + " rows=" + std::to_string(rows));
      std::vector<double> values(size_t(rows * src_c));
      for (double& v : values) v = normal(rng);
      DeviceTensor src(dt, values);
      const std::vector<double> src_rounded = src.get();
      DeviceTensor dst = DeviceTensor::poisoned(dt, size_t(rows * dst_c));
      cuda::copy_channels(dt, src.ptr(), src_c, src_offset, dst.ptr(), dst_c, dst_offset, rows, channels, nullptr,
                          "concat gpu test");
      sync();
      const std::vector<double> got = dst.get();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < dst_c; ++c) {
          const double g = got[size_t(r * dst_c + c)];
          if (c >= dst_offset && c < dst_offset + channels)
            ASSERT_EQ(g, src_rounded[size_t(r * src_c + src_offset + c - dst_offset)]) << r << "," << c;
          else
            ASSERT_TRUE(std::isnan(g)) << "written outside the slice at " << r << "," << c;
        }
    }
}

TEST(ConcatGpu, CopyChannelsRefusesASliceOutsideItsRows) {
  KILN_REQUIRE_GPU();
  DeviceTensor src(DType::F32, 10), dst(DType::F32, 10);
  testing::expect_error([&] { cuda::copy_channels(DType::F32, src.ptr(), 5, 3, dst.ptr(), 5, 0, 2, 3, nullptr, "t"); },
                        {"channels [3, 6) of 5"});
}

// x (5 channels) -> a = maxpool 1x1 (x itself, its gradient passed through); y = concat(a, x, a),
// 15 channels: y's slices are x exactly, and d(input) = (dy[0:5] + dy[10:15]) + dy[5:10], a's two slices
// summed first (its gradient), then the batch's own slice.
TEST(ConcatGpu, ProgramForwardBackwardAndInference) {
  KILN_REQUIRE_GPU();
  Blueprint m("concat");
  m.input(6, 5, 5).maxpool(1, 1, 0, "a");
  const Blueprint::Ref a = m.last();
  m.concat({a, m.source(), a}, "cat");
  CompileOptions o;
  o.device = Device::CUDA, o.batch = 3, o.loss = false, o.input_grad = true;
  Executable exe(compile(m, o), 1);
  const Program& p = exe.program();
  ASSERT_EQ(p.tensors[p.logits].shape, (Shape{3, 6, 5, 15}));
  const int64_t rows = 3 * 6 * 5;
  std::mt19937 rng(12);
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t(rows * 5)), dy(size_t(rows * 15)), x2(x.size());
  for (float& v : x) v = normal(rng);
  for (float& v : dy) v = normal(rng);
  for (float& v : x2) v = normal(rng);
  exe.write(p.input, x.data(), x.size() * sizeof(float));
  exe.write(p.output_grad, dy.data(), dy.size() * sizeof(float));
  const StepScalars s{0.f, 0, 1};
  exe.run_forward(s);
  const std::vector<float> y = exe.read<float>(p.logits);
  exe.run_backward(s);
  const std::vector<float> dx = exe.read<float>(p.input_grad);
  exe.write(p.input, x2.data(), x2.size() * sizeof(float));
  exe.run_inference(s);
  const std::vector<float> yi = exe.read<float>(p.inference_logits);
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < 15; ++c) {
      ASSERT_EQ(y[size_t(r * 15 + c)], x[size_t(r * 5 + c % 5)]) << r << "," << c;
      ASSERT_EQ(yi[size_t(r * 15 + c)], x2[size_t(r * 5 + c % 5)]) << r << "," << c;
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < 5; ++c) {
      const float* g = &dy[size_t(r * 15)];
      ASSERT_EQ(dx[size_t(r * 5 + c)], (g[c] + g[10 + c]) + g[5 + c]) << "d(input) " << r << "," << c;
    }
}

}  // namespace
}  // namespace kiln

// Initial values (src/runtime/initializers.h): each initializer's distribution as PyTorch defines
// it, one stream per (seed, tensor name), and the tensors that take no values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/random.h"
#include "kiln/threads.h"
#include "runtime/initializers.h"

namespace kiln {
namespace {

TensorSpec spec(const std::string& name, Shape shape, Init init, DType dtype = DType::F32) {
  TensorSpec t;
  t.name = name, t.shape = std::move(shape), t.init = init, t.dtype = dtype, t.role = TensorRole::Param;
  return t;
}

std::vector<float> values(const TensorSpec& t, uint64_t seed) {
  std::vector<float> v(size_t(numel(t.shape)));
  EXPECT_TRUE(initial_values(t, seed, reinterpret_cast<std::byte*>(v.data())));
  return v;
}

TEST(Initializers, KaimingNormalFanOutHasTorchvisionsSpread) {
  TensorSpec t = spec("conv.weight", {64, 3, 3, 32}, Init::KaimingNormalFanOut);
  t.fan_out = 64 * 3 * 3;
  const std::vector<float> v = values(t, 1);
  double sum = 0, sq = 0;
  for (float x : v) sum += x, sq += double(x) * x;
  const double n = double(v.size()), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  const double want = std::sqrt(2.0 / double(t.fan_out));
  // 18,432 draws: the sample sd is within ~0.5% of the true one (3 sd: 1.6%), the mean within
  // 3 * want / sqrt(n) of 0.
  EXPECT_NEAR(sd, want, 0.02 * want);
  EXPECT_NEAR(mean, 0, 3 * want / std::sqrt(n));
}

TEST(Initializers, UniformFanInStaysInsidePyTorchsBound) {
  TensorSpec t = spec("fc.weight", {10, 400}, Init::UniformFanIn);
  t.fan_in = 400;
  const double bound = 1.0 / std::sqrt(400.0);
  double lo = 1, hi = -1;
  for (float x : values(t, 3)) lo = std::min(lo, double(x)), hi = std::max(hi, double(x));
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_LT(lo, -0.95 * bound);  // 4,000 draws reach both ends
  EXPECT_GT(hi, 0.95 * bound);
}

TEST(Initializers, OneStreamPerSeedAndName) {
  TensorSpec a = spec("a.weight", {256}, Init::Normal), b = spec("b.weight", {256}, Init::Normal);
  a.init_value = b.init_value = 0.5;
  EXPECT_EQ(values(a, 7), values(a, 7));  // same seed, same name: same values
  EXPECT_NE(values(a, 7), values(a, 8));
  EXPECT_NE(values(a, 7), values(b, 7));  // the name, not the declaration order, picks the stream
}

// The random initializers fill in parallel blocks; a value depends on (seed, name, index) alone, so
// the thread count changes no byte. Large enough for many blocks of every initializer, and each
// value is checked against its own serial draw.
TEST(Initializers, ParallelFillsGiveTheSameBytesAtAnyThreadCount) {
  const int before = threads();
  TensorSpec normal = spec("big.normal", {300001}, Init::Normal), kaiming = spec("big.conv", {512, 3, 3, 64},
                                                                                    Init::KaimingNormalFanOut);
  TensorSpec uniform = spec("big.fc", {1000, 400}, Init::UniformFanIn);
  normal.init_value = 0.01f, kaiming.fan_out = 512 * 9, uniform.fan_in = 400;
  for (const TensorSpec* t : {&normal, &kaiming, &uniform}) {
    set_threads(1);
    const std::vector<float> one = values(*t, 5);
    set_threads(7);
    const std::vector<float> seven = values(*t, 5);
    ASSERT_EQ(std::memcmp(one.data(), seven.data(), one.size() * sizeof(float)), 0) << t->name;
  }
  set_threads(4);
  const std::vector<float> v = values(normal, 5);
  const uint64_t stream = [] {  // initializers.cpp's FNV-1a of the name
    uint64_t h = 1469598103934665603ULL;
    for (unsigned char c : std::string("big.normal")) h = (h ^ c) * 1099511628211ULL;
    return h;
  }();
  for (size_t i : {size_t(0), size_t(65535), size_t(65536), size_t(300000)})
    EXPECT_EQ(v[i], float(0.01f * random_normal(5, stream, i))) << i;
  set_threads(before);
}

TEST(Initializers, ConstantsFillEveryDtypeAndNoneOrActivationsTakeNothing) {
  TensorSpec c = spec("scale", {3}, Init::Constant, DType::I32);
  c.init_value = 65536;
  std::vector<int32_t> ints(3, -1);
  ASSERT_TRUE(initial_values(c, 1, reinterpret_cast<std::byte*>(ints.data())));
  EXPECT_EQ(ints, (std::vector<int32_t>{65536, 65536, 65536}));

  TensorSpec d = spec("running_var", {2}, Init::Ones, DType::F64);
  std::vector<double> doubles(2, 0);
  ASSERT_TRUE(initial_values(d, 1, reinterpret_cast<std::byte*>(doubles.data())));
  EXPECT_EQ(doubles, (std::vector<double>{1.0, 1.0}));

  std::vector<float> untouched(4, 42.f);
  auto* bytes = reinterpret_cast<std::byte*>(untouched.data());
  EXPECT_FALSE(initial_values(spec("x", {4}, Init::None), 1, bytes));
  TensorSpec act = spec("act", {4}, Init::Zeros);
  act.role = TensorRole::Activation;
  EXPECT_FALSE(initial_values(act, 1, bytes));
  TensorSpec random_ints = spec("count", {4}, Init::KaimingNormalFanOut, DType::I32);  // I32: constants only
  random_ints.fan_out = 4;
  EXPECT_FALSE(initial_values(random_ints, 1, bytes));
  EXPECT_EQ(untouched, std::vector<float>(4, 42.f));
}

}  // namespace
}  // namespace kiln

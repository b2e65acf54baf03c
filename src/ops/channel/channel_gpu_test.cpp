// The channel family on the GPU: the copies against the host's float64 reference
// (channel_test_reference.h) in F32, F16 and BF16, at aligned pointers and one element in (the packed
// and the scalar paths), with channel counts that take every kernel (tiles of 2, 3 and 4 groups and
// their inverses, the any-shuffle kernel, runs of every pack width), outputs poisoned so that an
// element never written shows; every element equal, since nothing is computed; the check catching
// the inverse permutation; and a CUDA program of two ShuffleNetV2 stride-1 units, forward, backward
// and inference (captured and replayed), against host values.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/channel/channel_cuda.h"
#include "ops/channel/channel_test_reference.h"
#include "support/cbr_block.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using namespace gpu_test;
using channel_test::Values;

void expect_same(const std::string& what, const Values& got, const Values& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t misses = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i)
    if (!(got[i] == want[i]) && misses++ == 0) first = int64_t(i);
  EXPECT_EQ(misses, 0) << what << ": " << misses << " elements differ from the reference, first at " << first;
}

std::string label(DType dt, size_t offset) { return std::string(name(dt)) + " offset " + std::to_string(offset); }

struct ShuffleCase {
  int64_t rows, c, g;
};
// 2, 3 and 4 groups (tiles; 58 and 116 channels a group take packs of 2 and 4 in fp16); their
// inverses as 12 / 6 = 2 channels a group (the scattering tiles); 5 and 6 groups (the any-shuffle
// kernel); the identities; more rows than one grid holds at once.
const std::vector<ShuffleCase> kShuffles = {{37, 12, 2},   {37, 12, 3},  {37, 12, 4}, {37, 12, 6},  {5, 30, 5},
                                            {3, 7, 1},     {3, 8, 8},    {1000, 116, 2}, {1000, 232, 2},
                                            {300000, 16, 2}};

TEST(ChannelGpu, ShufflesMatchTheHost) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(1);
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (const ShuffleCase& s : kShuffles)
      for (size_t offset : {size_t{0}, size_t{1}}) {
        const std::string what = label(dt, offset) + " rows=" + std::to_string(s.rows) + " c=" + std::to_string(s.c) +
                                 " g=" + std::to_string(s.g);
        const size_t n = size_t(s.rows * s.c);
        const Values x = random_values<double>(dt, n, rng);
        DeviceTensor in(dt, x, offset), y = DeviceTensor::poisoned(dt, n, offset), dx = DeviceTensor::poisoned(dt, n, offset);
        cuda::shuffle_channels(dt, in.ptr(), y.ptr(), s.rows, s.c, s.g, nullptr, "channel gpu test");
        cuda::shuffle_channels(dt, in.ptr(), dx.ptr(), s.rows, s.c, s.c / s.g, nullptr, "channel gpu test");
        sync();
        expect_same(what + " y", y.get(), channel_test::shuffle(x, s.rows, s.c, s.g));
        expect_same(what + " dx", dx.get(), channel_test::unshuffle(x, s.rows, s.c, s.g));
      }
}

struct SliceCase {
  int64_t rows, c, start, count;
};
// Runs whose extents allow packs of 8, 4, 2 and 1 elements.
const std::vector<SliceCase> kSlices = {{37, 16, 8, 8},     {37, 12, 4, 4},     {37, 12, 6, 6},     {37, 12, 3, 5},
                                        {4, 24, 23, 1},     {1000, 116, 58, 58}, {1000, 232, 0, 116}};

TEST(ChannelGpu, SlicesMatchTheHost) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(2);
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (const SliceCase& s : kSlices)
      for (size_t offset : {size_t{0}, size_t{1}}) {
        const Values x = random_values<double>(dt, size_t(s.rows * s.c), rng);
        DeviceTensor in(dt, x, offset), y = DeviceTensor::poisoned(dt, size_t(s.rows * s.count), offset);
        cuda::slice_channels(dt, in.ptr(), s.c, s.start, y.ptr(), s.rows, s.count, nullptr, "channel gpu test");
        sync();
        expect_same(label(dt, offset) + " [" + std::to_string(s.start) + ", +" + std::to_string(s.count) + ") of " +
                        std::to_string(s.c),
                    y.get(), channel_test::slice(x, s.rows, s.c, s.start, s.count));
      }
}

struct JoinCase {
  int64_t rows, c, start;
  std::vector<int64_t> parts;
};
const std::vector<JoinCase> kJoins = {
    {37, 16, 0, {8, 8}}, {37, 12, 2, {3, 4}}, {37, 12, 5, {1}}, {3, 9, 0, {2, 3, 4}}, {1000, 116, 0, {58, 58}}};

TEST(ChannelGpu, SliceGradientsJoinAsTheHost) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(3);
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (const JoinCase& j : kJoins)
      for (size_t offset : {size_t{0}, size_t{1}}) {
        std::vector<DeviceTensor> dys;
        std::vector<cuda::SliceGradientPart> parts;
        Values want(size_t(j.rows * j.c), 0.0);
        int64_t at = j.start;
        for (int64_t count : j.parts) {
          const Values dy = random_values<double>(dt, size_t(j.rows * count), rng);
          channel_test::add_slice_gradient(want, dy, j.rows, j.c, at, count);
          at += count;
          dys.emplace_back(dt, dy, offset);
        }
        for (size_t p = 0; p < dys.size(); ++p) parts.push_back({dys[p].ptr(), j.parts[p]});
        DeviceTensor dx = DeviceTensor::poisoned(dt, want.size(), offset);
        cuda::join_slice_gradients(dt, parts, j.start, dx.ptr(), j.rows, j.c, nullptr, "channel gpu test");
        sync();
        expect_same(label(dt, offset) + " c=" + std::to_string(j.c) + " from " + std::to_string(j.start), dx.get(), want);
      }
}

// The equality check catches the inverse permutation in place of the shuffle, on the device too.
TEST(ChannelGpu, TheCheckCatchesTheInversePermutation) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(4);
  const ShuffleCase s{37, 12, 3};
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const Values x = random_values<double>(dt, size_t(s.rows * s.c), rng);
    DeviceTensor in(dt, x), inverse = DeviceTensor::poisoned(dt, x.size());
    cuda::shuffle_channels(dt, in.ptr(), inverse.ptr(), s.rows, s.c, s.c / s.g, nullptr, "channel gpu test");
    sync();
    EXPECT_NONFATAL_FAILURE(expect_same("inverse", inverse.get(), channel_test::shuffle(x, s.rows, s.c, s.g)),
                            "differ from the reference");
  }
}

TEST(ChannelGpu, RefusesGroupsThatDoNotDivideTheChannels) {
  KILN_REQUIRE_GPU();
  DeviceTensor a(DType::F32, 12), b(DType::F32, 12);
  testing::expect_error([&] { cuda::shuffle_channels(DType::F32, a.ptr(), b.ptr(), 1, 12, 5, nullptr, "t"); },
                        {"shuffle_channels", "12 channels in 5 groups"});
}

// --- A program: two ShuffleNetV2 stride-1 units (16 channels, a biased 1x1 convolution and ReLU as
// the branch), shuffled in 2 and then 4 groups ---

constexpr int64_t kBatch = 3, kH = 4, kW = 5, kRows = kBatch * kH * kW, kC = 16, kHalf = 8;

void unit(Blueprint& m, const std::string& name, int groups) {
  const Blueprint::Ref x = m.last();
  m.channel_slice(0, int(kHalf), name + ".x1");
  const Blueprint::Ref x1 = m.last();
  m.from(x).channel_slice(int(kHalf), int(kHalf), name + ".x2");
  m.conv(int(kHalf), 1, 1, 0, true, name + ".branch.0").relu(name + ".branch.1");
  m.concat({x1, m.last()}, name + ".cat").channel_shuffle(groups, name + ".shuffle");
}

Blueprint two_units() {
  Blueprint m("units");
  m.input(int(kH), int(kW), int(kC));
  unit(m, "u1", 2);
  unit(m, "u2", 4);
  return m;
}

// Multiples of `step` in [lo, hi) * step: held exactly by all three dtypes where they are inputs.
Values grid(size_t n, std::mt19937& rng, int lo, int hi, double step) {
  std::uniform_int_distribution<int> d(lo, hi - 1);
  Values v(n);
  for (double& e : v) e = d(rng) * step;
  return v;
}

struct Branch {
  Values w, b;  // [out][in] small integers; odd multiples of 1/16 (no pre-activation is 0)
};

struct Trace {
  Values x2, pre;
};

Values unit_forward(const Values& x, int64_t groups, const Branch& br, Trace& t) {
  const Values x1 = channel_test::slice(x, kRows, kC, 0, kHalf);
  t.x2 = channel_test::slice(x, kRows, kC, kHalf, kHalf);
  t.pre.assign(size_t(kRows * kHalf), 0.0);
  Values out(t.pre.size());
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t k = 0; k < kHalf; ++k) {
      double s = br.b[size_t(k)];
      for (int64_t c = 0; c < kHalf; ++c) s += br.w[size_t(k * kHalf + c)] * t.x2[size_t(r * kHalf + c)];
      t.pre[size_t(r * kHalf + k)] = s;
      out[size_t(r * kHalf + k)] = s > 0 ? s : 0;
    }
  return channel_test::shuffle(channel_test::cat({x1, out}, {kHalf, kHalf}, kRows), kRows, kC, groups);
}

Values unit_backward(const Values& dy, int64_t groups, const Branch& br, const Trace& t, Values& dw) {
  const Values dcat = channel_test::unshuffle(dy, kRows, kC, groups);
  Values dpre = channel_test::slice(dcat, kRows, kC, kHalf, kHalf);
  for (size_t i = 0; i < dpre.size(); ++i) dpre[i] = t.pre[i] > 0 ? dpre[i] : 0;
  dw.assign(size_t(kHalf * kHalf), 0.0);
  Values dx2(size_t(kRows * kHalf), 0.0);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t k = 0; k < kHalf; ++k)
      for (int64_t c = 0; c < kHalf; ++c) {
        dw[size_t(k * kHalf + c)] += dpre[size_t(r * kHalf + k)] * t.x2[size_t(r * kHalf + c)];
        dx2[size_t(r * kHalf + c)] += br.w[size_t(k * kHalf + c)] * dpre[size_t(r * kHalf + k)];
      }
  Values dx(size_t(kRows * kC), 0.0);
  channel_test::add_slice_gradient(dx, channel_test::slice(dcat, kRows, kC, 0, kHalf), kRows, kC, 0, kHalf);
  channel_test::add_slice_gradient(dx, dx2, kRows, kC, kHalf, kHalf);
  return dx;
}

TEST(ChannelGpu, TwoUnitsForwardBackwardAndInference) {
  KILN_REQUIRE_GPU();
  for (Precision precision : {Precision::FP32, Precision::FP16, Precision::BF16}) {
    const DType dt = testing::activation_dtype(precision);
    SCOPED_TRACE(name(dt));
    CompileOptions o;
    o.device = Device::CUDA, o.precision = precision, o.batch = int(kBatch), o.loss = false, o.input_grad = true;
    Executable exe(compile(two_units(), o), 1);
    const Program& p = exe.program();
    std::mt19937 rng(5);
    Branch b1{grid(size_t(kHalf * kHalf), rng, -2, 3, 1.0), grid(size_t(kHalf), rng, -8, 8, 1.0 / 8)};
    Branch b2{grid(size_t(kHalf * kHalf), rng, -2, 3, 1.0), grid(size_t(kHalf), rng, -8, 8, 1.0 / 8)};
    for (Branch* b : {&b1, &b2})
      for (double& e : b->b) e += 1.0 / 16;
    const std::map<std::string, const Values*> params = {{"u1.branch.0.weight", &b1.w},
                                                         {"u1.branch.0.bias", &b1.b},
                                                         {"u2.branch.0.weight", &b2.w},
                                                         {"u2.branch.0.bias", &b2.b}};
    for (const auto& [param, values] : params) testing::write_floats(exe, exe.id(param), testing::cast<float>(*values));
    const Values x = grid(size_t(kRows * kC), rng, -32, 32, 1.0 / 8), dy = grid(x.size(), rng, -32, 32, 1.0 / 8);
    testing::write_floats(exe, p.input, testing::cast<float>(x));
    testing::write_floats(exe, p.output_grad, testing::cast<float>(dy));
    const StepScalars s{0.f, 0, 1};
    exe.run_forward(s);
    const std::vector<float> y = testing::read_floats(exe, p.tensors[p.logits].name);
    exe.run_backward(s);
    const std::vector<float> dx = testing::read_floats(exe, p.tensors[p.input_grad].name);
    Trace t1, t2;
    const Values want_y = unit_forward(unit_forward(x, 2, b1, t1), 4, b2, t2);
    Values dw1, dw2;
    const Values want_dx = unit_backward(unit_backward(dy, 4, b2, t2, dw2), 2, b1, t1, dw1);
    testing::expect_close_to_reference("y", y, want_y, tolerance(dt));
    testing::expect_close_to_reference("d(input)", dx, want_dx, tolerance(dt));
    testing::expect_close_to_reference("u1 weight gradient", exe.gradient("u1.branch.0.weight"), dw1, tolerance(dt));
    testing::expect_close_to_reference("u2 weight gradient", exe.gradient("u2.branch.0.weight"), dw2, tolerance(dt));
    // The bound catches a shuffle in the wrong groups: the second unit's in 2 instead of 4.
    Trace w1, w2;
    EXPECT_GT(testing::rel_l2(y, unit_forward(unit_forward(x, 2, b1, w1), 2, b2, w2)), 10 * tolerance(dt));
    // Inference three times on new data: op by op, captured, then replayed from the CUDA Graph.
    for (int run = 0; run < 3; ++run) {
      const Values xi = grid(x.size(), rng, -32, 32, 1.0 / 8);
      testing::write_floats(exe, p.input, testing::cast<float>(xi));
      exe.run_inference(s);
      Trace i1, i2;
      testing::expect_close_to_reference("inference y, run " + std::to_string(run),
                                         testing::read_floats(exe, p.tensors[p.inference_logits].name),
                                         unit_forward(unit_forward(xi, 2, b1, i1), 4, b2, i2), tolerance(dt));
    }
  }
}

}  // namespace
}  // namespace kiln

// The channel family's CPU kernels against float64 loops (channel_test_reference.h), in double and
// float: shuffles of 2, 3, 4 and 6 groups (and the identities of 1 group and of one channel a group)
// with their inverses, slices, and slice gradients joined side by side with zeros in the channels no
// slice took. Every result is the inputs' bits, so each is compared for equality, at any thread
// count; plausible wrong kernels (the inverse permutation, a slice one channel off) fail the check.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/channel/channel_cpu.h"
#include "ops/channel/channel_test_reference.h"
#include "support/scoped_threads.h"

namespace kiln {
namespace {

using channel_test::Values;

Values normals(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d;
  Values v(n);
  for (double& e : v) e = d(rng);
  return v;
}

template <class T>
std::vector<T> as(const Values& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <class T>
Values widened(const std::vector<T>& v) {
  return Values(v.begin(), v.end());
}

// Outputs start as NaN, so an element a kernel never writes differs from every reference value.
template <class T>
std::vector<T> poisoned(size_t n) {
  return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
}

// Every element equal: the kernels copy, so a float result widened to double is the reference's
// value of the float inputs exactly.
void expect_same(const std::string& what, const Values& got, const Values& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t misses = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i)
    if (!(got[i] == want[i]) && misses++ == 0) first = int64_t(i);
  EXPECT_EQ(misses, 0) << what << ": " << misses << " elements differ from the reference, first at " << first;
}

struct ShuffleCase {
  int64_t rows, c, g;
};
// Odd rows; 2 groups of an even count and of 58 channels (ShuffleNetV2 1.0x's 116); the identities;
// enough elements for several tasks of the pool.
const std::vector<ShuffleCase> kShuffles = {{37, 12, 2}, {37, 12, 3}, {37, 12, 4}, {37, 12, 6},
                                            {3, 7, 1},   {3, 8, 8},   {5000, 116, 2}};

template <class T>
Values run_shuffle(const Values& x, const ShuffleCase& s, int64_t groups) {
  const std::vector<T> in = as<T>(x);
  std::vector<T> out = poisoned<T>(x.size());
  cpu::shuffle_channels<T>(in.data(), out.data(), s.rows, s.c, groups);
  return widened(out);
}

template <class T>
void check_shuffles() {
  uint32_t seed = 1;
  for (const ShuffleCase& s : kShuffles) {
    const std::string what = std::string(sizeof(T) == 4 ? "float" : "double") + " rows=" + std::to_string(s.rows) +
                             " c=" + std::to_string(s.c) + " g=" + std::to_string(s.g);
    const Values x = widened(as<T>(normals(size_t(s.rows * s.c), seed++)));
    expect_same(what + " y", run_shuffle<T>(x, s, s.g), channel_test::shuffle(x, s.rows, s.c, s.g));
    // The backward: the shuffle in c / g groups is the inverse permutation.
    expect_same(what + " dx", run_shuffle<T>(x, s, s.c / s.g), channel_test::unshuffle(x, s.rows, s.c, s.g));
  }
}

TEST(ChannelCpu, DoubleShufflesMatchTheReference) { check_shuffles<double>(); }
TEST(ChannelCpu, FloatShufflesMatchTheReference) { check_shuffles<float>(); }

struct SliceCase {
  int64_t rows, c, start, count;
};
const std::vector<SliceCase> kSlices = {{37, 12, 0, 6}, {37, 12, 6, 6}, {37, 12, 3, 5}, {4, 24, 23, 1}, {2000, 116, 58, 58}};

template <class T>
Values run_slice(const Values& x, const SliceCase& s) {
  const std::vector<T> in = as<T>(x);
  std::vector<T> out = poisoned<T>(size_t(s.rows * s.count));
  cpu::slice_channels<T>(in.data(), s.c, s.start, out.data(), s.rows, s.count);
  return widened(out);
}

template <class T>
void check_slices() {
  uint32_t seed = 20;
  for (const SliceCase& s : kSlices) {
    const Values x = widened(as<T>(normals(size_t(s.rows * s.c), seed++)));
    expect_same("rows=" + std::to_string(s.rows) + " [" + std::to_string(s.start) + ", " +
                    std::to_string(s.start + s.count) + ") of " + std::to_string(s.c),
                run_slice<T>(x, s), channel_test::slice(x, s.rows, s.c, s.start, s.count));
  }
}

TEST(ChannelCpu, DoubleSlicesMatchTheReference) { check_slices<double>(); }
TEST(ChannelCpu, FloatSlicesMatchTheReference) { check_slices<float>(); }

// Slice gradients side by side from `start`, in rows of c channels.
struct JoinCase {
  int64_t rows, c, start;
  std::vector<int64_t> parts;
};
// A chunk's halves; a run inside the channels (zeros on both sides); one slice; ShuffleNetV2's halves.
const std::vector<JoinCase> kJoins = {
    {37, 12, 0, {6, 6}}, {37, 12, 2, {3, 4}}, {37, 12, 5, {1}}, {3, 9, 0, {2, 3, 4}}, {2000, 116, 0, {58, 58}}};

template <class T>
Values run_join(const std::vector<Values>& dys, const JoinCase& j) {
  std::vector<std::vector<T>> in;
  for (const Values& dy : dys) in.push_back(as<T>(dy));
  std::vector<cpu::SliceGradient<T>> parts;
  for (size_t p = 0; p < in.size(); ++p) parts.push_back({in[p].data(), j.parts[p]});
  std::vector<T> dx = poisoned<T>(size_t(j.rows * j.c));
  cpu::join_slice_gradients<T>(parts, j.start, dx.data(), j.rows, j.c);
  return widened(dx);
}

template <class T>
void check_joins() {
  uint32_t seed = 40;
  for (const JoinCase& j : kJoins) {
    std::vector<Values> dys;
    Values want(size_t(j.rows * j.c), 0.0);
    int64_t at = j.start;
    for (int64_t count : j.parts) {
      dys.push_back(widened(as<T>(normals(size_t(j.rows * count), seed++))));
      channel_test::add_slice_gradient(want, dys.back(), j.rows, j.c, at, count);
      at += count;
    }
    expect_same("rows=" + std::to_string(j.rows) + " c=" + std::to_string(j.c) + " from " + std::to_string(j.start),
                run_join<T>(dys, j), want);
  }
}

TEST(ChannelCpu, DoubleSliceGradientsJoinAsTheReference) { check_joins<double>(); }
TEST(ChannelCpu, FloatSliceGradientsJoinAsTheReference) { check_joins<float>(); }

TEST(ChannelCpu, TheSameBytesAtAnyThreadCount) {
  const ShuffleCase s = kShuffles.back();
  const SliceCase sl = kSlices.back();
  const JoinCase j = kJoins.back();
  const Values x = normals(size_t(s.rows * s.c), 60), a = normals(size_t(j.rows * 58), 61),
               b = normals(size_t(j.rows * 58), 62);
  std::vector<Values> runs;
  for (int threads : {1, 3, 8}) {
    testing::ScopedThreads scoped(threads);
    Values all = run_shuffle<float>(x, s, s.g);
    for (const Values& part : {run_shuffle<float>(x, s, s.c / s.g), run_slice<float>(x, sl), run_join<float>({a, b}, j)})
      all.insert(all.end(), part.begin(), part.end());
    runs.push_back(all);
  }
  // Compared as bytes: NaN (an element never written) would differ from itself.
  auto bytes = [](const Values& v) {
    std::vector<uint8_t> out(v.size() * sizeof(double));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  };
  EXPECT_EQ(bytes(runs[0]), bytes(runs[1]));
  EXPECT_EQ(bytes(runs[0]), bytes(runs[2]));
}

// The equality checks catch plausible wrong kernels: the inverse permutation in place of the
// shuffle (the groups and the channels a group swapped), a slice one channel off, and a join that
// leaves the channels no slice took unwritten.
TEST(ChannelCpu, TheChecksCatchPlausibleBugs) {
  const ShuffleCase s{37, 12, 3};
  const Values x = normals(size_t(s.rows * s.c), 70);
  EXPECT_NONFATAL_FAILURE(expect_same("inverse", run_shuffle<double>(x, s, s.c / s.g),
                                      channel_test::shuffle(x, s.rows, s.c, s.g)),
                          "differ from the reference");
  const SliceCase off{37, 12, 4, 5};  // the reference takes [3, 8)
  EXPECT_NONFATAL_FAILURE(expect_same("off by one", run_slice<double>(x, off), channel_test::slice(x, 37, 12, 3, 5)),
                          "differ from the reference");
  const JoinCase j{37, 12, 2, {3, 4}};
  const Values a = normals(size_t(37 * 3), 71), b = normals(size_t(37 * 4), 72);
  Values want(size_t(37 * 12), 0.0);
  channel_test::add_slice_gradient(want, a, 37, 12, 2, 3);
  channel_test::add_slice_gradient(want, b, 37, 12, 5, 4);
  expect_same("joined", run_join<double>({a, b}, j), want);
  Values unwritten = run_join<double>({a, b}, j);  // the kernel's parts, NaN (the poison) in every other channel
  for (int64_t r = 0; r < 37; ++r)
    for (int64_t k : {0, 1, 9, 10, 11}) unwritten[size_t(r * 12 + k)] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NONFATAL_FAILURE(expect_same("zeros left unwritten", unwritten, want), "differ from the reference");
}

}  // namespace
}  // namespace kiln

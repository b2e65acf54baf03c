// oneDNN's CPU convolutions (conv_onednn_cpu.h) at the shapes the model zoo trains and on the
// windows of torchvision's catalogue (groups, depthwise, dilation, rectangular kernels and strides,
// padding of its own on each side): each result against the float64 reference within a bound that
// rejects a transposed filter (or, on any window, each plausible flaw), oneDNN seen to run them
// (not the fallback), the reference kernels behind `--cpu-kernels reference`, and the same bytes at
// any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_kernels.h"
#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/threads.h"
#include "ops/conv/conv_cpu.h"
#include "ops/conv/conv_onednn_cpu.h"
#include "ops/conv/conv_test_reference.h"
#include "ops/conv/conv_window_reference.h"

namespace kiln::cpu {
namespace {

using conv_test::ConvShape;

// |got - want| relative to the sum of |terms| of each result: fp32 products summed in fp32 err by
// a few units of 2^-24 of that sum in practice (the worst case grows with the term count, up to 64
// x 20 x 20 here); 2e-5 is ~300 of them, and the transposed filter misses it by orders of
// magnitude (expect_matches checks it does).
constexpr double kBound = 2e-5;

struct Case {
  int64_t n, h, c, k, r, stride, pad;
  bool bias;
  bool onednn_runs;  // oneDNN has a fast kernel for it (not only its reference one), and runs it
};

// The digits CNN's layers (batch 64; its first layer has one channel), a ResNet block's 3x3
// stride-2 and 1x1 convolutions, a 7x7 stride-2 stem on three channels, an odd batch, and a
// 512x512x3x3 filter (ResNet's last stage) too big for more than two batch pieces' partial weight
// gradients, so its wgrad runs in slices of output channels.
const std::vector<Case> kCases = {
    {64, 20, 1, 32, 3, 1, 1, false, false}, {64, 20, 32, 32, 3, 1, 1, false, true},
    {64, 10, 32, 64, 3, 1, 1, false, true}, {16, 14, 64, 64, 3, 2, 1, false, true},
    {16, 14, 64, 128, 1, 1, 0, false, true}, {4, 32, 3, 16, 7, 2, 3, false, false},
    {7, 9, 16, 32, 3, 1, 1, true, true}, {4, 4, 512, 512, 3, 1, 1, true, true},
};

ConvShape shape_of(const Case& t) { return conv_test::shape(t.n, t.h, t.h, t.c, t.k, t.r, t.stride, t.pad, DType::F32); }

ConvGeom geom_of(const ConvShape& s) {
  return ConvGeom::make({s.n, s.h, s.w, s.c}, {s.k, s.r, s.s, s.c}, int(s.stride), int(s.pad));
}

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<double> doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Sets the kernels for a test and puts back what was there.
struct KernelsFor {
  CpuKernels saved = cpu_kernels();
  explicit KernelsFor(CpuKernels k) { set_cpu_kernels(k); }
  ~KernelsFor() { set_cpu_kernels(saved); }
};

struct Inputs {
  std::vector<float> x, w, b, dy;
};
Inputs inputs(const ConvShape& s, unsigned seed) {
  std::mt19937 rng(seed);
  Inputs in;
  in.x = random_floats(size_t(s.n * s.h * s.w * s.c), rng);
  in.w = random_floats(size_t(s.k * s.r * s.s * s.c), rng);
  in.b = random_floats(size_t(s.k), rng);
  in.dy = random_floats(size_t(s.n * s.ho * s.wo * s.k), rng);
  return in;
}

// y (bias taken out), dx and dw against the float64 reference within `bound`, each checked to
// reject a transposed filter (conv_test::expect_matches); returns y's worst relative miss.
double expect_all_match(const ConvShape& s, const Inputs& in, const std::vector<double>& y,
                        const std::vector<float>& dx, const std::vector<float>& dw, double bound) {
  std::vector<double> want, scale, wrong, wrong_scale;
  conv_test::fprop_reference(s, doubles(in.x), doubles(in.w), false, want, scale);
  conv_test::fprop_reference(s, doubles(in.x), doubles(in.w), true, wrong, wrong_scale);
  conv_test::expect_matches("y", y, want, scale, wrong, s, bound);
  const double y_worst = conv_test::relative_miss(y, want, scale, bound).worst;

  conv_test::dgrad_reference(s, doubles(in.dy), doubles(in.w), false, want, scale);
  conv_test::dgrad_reference(s, doubles(in.dy), doubles(in.w), true, wrong, wrong_scale);
  conv_test::expect_matches("dx", doubles(dx), want, scale, wrong, s, bound);

  conv_test::wgrad_reference(s, doubles(in.x), doubles(in.dy), false, want, scale);
  conv_test::wgrad_reference(s, doubles(in.x), doubles(in.dy), true, wrong, wrong_scale);
  conv_test::expect_matches("dw", doubles(dw), want, scale, wrong, s, bound);
  return y_worst;
}

TEST(ConvOnednn, MatchesFloat64AtTheZoosShapes) {
  if (!onednn_built()) GTEST_SKIP() << "this build has no oneDNN (scripts/setup.sh fetches it)";
  const KernelsFor onednn(CpuKernels::OneDnn);
  unsigned seed = 1;
  for (const Case& t : kCases) {
    const ConvShape s = shape_of(t);
    SCOPED_TRACE(conv_test::label(s) + (t.bias ? " bias" : ""));
    const ConvGeom g = geom_of(s);
    const Inputs in = inputs(s, seed++);
    // Outputs start as NaN: each kernel must write all of them.
    std::vector<float> y(in.dy.size(), NAN), dx(in.x.size(), NAN), dw(in.w.size(), NAN), db(size_t(s.k), NAN);
    const float* bias = t.bias ? in.b.data() : nullptr;
    const bool ran_fwd = onednn_conv_fwd(g, in.x.data(), in.w.data(), bias, y.data());
    const bool ran_dgrad = onednn_conv_dgrad(g, in.dy.data(), in.w.data(), dx.data());
    const bool ran_wgrad = onednn_conv_wgrad(g, in.dy.data(), in.x.data(), dw.data(), t.bias ? db.data() : nullptr);
    if (t.onednn_runs) {
      EXPECT_TRUE(ran_fwd && ran_dgrad && ran_wgrad) << "oneDNN left it to the reference kernels";
    }
    // Through conv_cpu.h, as the ops call it: oneDNN where it ran, the reference kernel elsewhere.
    conv_fwd<float>(g, in.x.data(), in.w.data(), bias, y.data());
    conv_dgrad<float>(g, in.dy.data(), in.w.data(), dx.data());
    conv_wgrad<float>(g, in.dy.data(), in.x.data(), dw.data(), t.bias ? db.data() : nullptr);

    std::vector<double> got = doubles(y);
    if (t.bias)
      for (size_t i = 0; i < got.size(); ++i) got[i] -= in.b[i % size_t(s.k)];  // the reference has no bias
    expect_all_match(s, in, got, dx, dw, kBound);
    if (t.bias) {
      for (int64_t k = 0; k < s.k; ++k) {
        double sum = 0, abs_sum = 0;
        for (size_t i = size_t(k); i < in.dy.size(); i += size_t(s.k)) sum += in.dy[i], abs_sum += std::fabs(in.dy[i]);
        EXPECT_LE(std::fabs(db[size_t(k)] - sum), kBound * abs_sum) << "db[" << k << "]";
      }
    }
  }
}

// --- Any window ---

using conv_test::WindowProblem;

ConvWindow window(int stride_h, int stride_w, int top, int left, int bottom, int right, int dilation_h,
                  int dilation_w, int groups) {
  return {stride_h, stride_w, top, left, bottom, right, dilation_h, dilation_w, groups};
}

struct WindowCase {
  WindowProblem p;
  bool bias;
  bool onednn_runs;  // oneDNN has a fast kernel for it (not only its reference one), and runs it
};

// torchvision's windows: MobileNet's and EfficientNet's depthwise 3x3 and 5x5 (stride 1 and 2), a
// depthwise multiplier of 2, ResNeXt's 32 groups of 4 channels, AlexNet's 2 groups, DeepLab's
// dilation 2, Inception's 1x7 and 7x1, TensorFlow's "same" padding (top 1, left 0, bottom 2, right
// 1), a stride of (2,1), a 3x5 kernel, and all of them at once. Problems of the same tensors but
// another window must not share a primitive: stride 3 with dilation 1 and 2, stride 2 with the
// bottom and right padding 1 and 2 (each pair of one output size), groups 2 and 4.
const std::vector<WindowCase> kWindowCases = {
    {{8, 14, 14, 32, 32, 3, 3, window(1, 1, 1, 1, 1, 1, 1, 1, 32)}, false, true},
    {{8, 15, 15, 24, 24, 3, 3, window(2, 2, 1, 1, 1, 1, 1, 1, 24)}, true, true},
    {{4, 12, 12, 40, 40, 5, 5, window(1, 1, 2, 2, 2, 2, 1, 1, 40)}, false, true},
    {{4, 10, 10, 16, 32, 3, 3, window(1, 1, 1, 1, 1, 1, 1, 1, 16)}, true, true},
    {{4, 14, 14, 128, 128, 3, 3, window(1, 1, 1, 1, 1, 1, 1, 1, 32)}, false, true},
    {{4, 13, 13, 32, 64, 3, 3, window(1, 1, 1, 1, 1, 1, 1, 1, 2)}, true, true},
    {{4, 13, 13, 32, 64, 3, 3, window(1, 1, 1, 1, 1, 1, 1, 1, 4)}, true, true},
    {{4, 16, 16, 32, 32, 3, 3, window(1, 1, 2, 2, 2, 2, 2, 2, 1)}, false, true},
    {{4, 16, 16, 32, 32, 3, 3, window(1, 1, 1, 1, 1, 1, 1, 1, 1)}, false, true},
    {{4, 16, 16, 32, 32, 3, 3, window(3, 3, 2, 2, 2, 2, 1, 1, 1)}, false, true},
    {{4, 16, 16, 32, 32, 3, 3, window(3, 3, 2, 2, 2, 2, 2, 2, 1)}, false, true},
    {{4, 13, 13, 16, 16, 3, 3, window(2, 2, 1, 1, 1, 1, 1, 1, 1)}, true, true},
    {{4, 13, 13, 16, 16, 3, 3, window(2, 2, 1, 1, 2, 2, 1, 1, 1)}, true, true},
    {{4, 17, 17, 32, 32, 1, 7, window(1, 1, 0, 3, 0, 3, 1, 1, 1)}, true, true},
    {{4, 17, 17, 32, 32, 7, 1, window(1, 1, 3, 0, 3, 0, 1, 1, 1)}, false, true},
    {{4, 12, 12, 16, 32, 3, 3, window(1, 1, 1, 0, 2, 1, 1, 1, 1)}, true, true},
    {{4, 12, 12, 16, 32, 3, 3, window(1, 1, 2, 1, 1, 0, 1, 1, 1)}, true, true},
    {{4, 12, 12, 16, 32, 3, 3, window(2, 1, 1, 1, 1, 1, 1, 1, 1)}, false, true},
    {{4, 12, 12, 16, 16, 3, 5, window(1, 1, 1, 2, 1, 2, 1, 1, 1)}, false, true},
    {{2, 9, 15, 4, 6, 3, 5, window(2, 1, 1, 0, 2, 1, 2, 3, 2)}, true, true},
    {{3, 11, 10, 16, 32, 3, 3, window(1, 2, 0, 2, 1, 1, 2, 2, 16)}, true, true},
};

ConvGeom geom_of(const WindowProblem& p) { return ConvGeom::make(p.x_shape(), p.w_shape(), p.win); }

Inputs inputs(const WindowProblem& p, unsigned seed) {
  std::mt19937 rng(seed);
  Inputs in;
  in.x = random_floats(p.x_numel(), rng);
  in.w = random_floats(p.w_numel(), rng);
  in.b = random_floats(size_t(p.k), rng);
  in.dy = random_floats(p.y_numel(), rng);
  return in;
}

// oneDNN's fp32 results within the worst case of fp32 rounding (conv_test::rounding_bound: (n + 1)
// units of 2^-24 of each result's sum of |terms|, n the most terms a result sums, whatever the
// order oneDNN adds them in), a bound each plausible flaw of the window misses.
TEST(ConvOnednn, MatchesFloat64OnAnyWindow) {
  if (!onednn_built()) GTEST_SKIP() << "this build has no oneDNN (scripts/setup.sh fetches it)";
  const KernelsFor onednn(CpuKernels::OneDnn);
  unsigned seed = 41;
  for (const WindowCase& t : kWindowCases) {
    const WindowProblem& p = t.p;
    SCOPED_TRACE(conv_test::label(p) + (t.bias ? " bias" : ""));
    const ConvGeom g = geom_of(p);
    const Inputs in = inputs(p, seed++);
    std::vector<float> y(in.dy.size(), NAN), dx(in.x.size(), NAN), dw(in.w.size(), NAN), db(size_t(p.k), NAN);
    const float* bias = t.bias ? in.b.data() : nullptr;
    float* dbias = t.bias ? db.data() : nullptr;
    const bool ran_fwd = onednn_conv_fwd(g, in.x.data(), in.w.data(), bias, y.data());
    const bool ran_dgrad = onednn_conv_dgrad(g, in.dy.data(), in.w.data(), dx.data());
    const bool ran_wgrad = onednn_conv_wgrad(g, in.dy.data(), in.x.data(), dw.data(), dbias);
    if (t.onednn_runs) {
      EXPECT_TRUE(ran_fwd) << "oneDNN left the forward pass to the reference kernels";
      EXPECT_TRUE(ran_dgrad) << "oneDNN left the data gradient to the reference kernels";
      // Depthwise weight gradients of windows over 3x3 are kiln's own loops' (conv_onednn_cpu.h says why).
      EXPECT_EQ(ran_wgrad, !(g.depthwise() && g.r * g.s > 9))
          << "oneDNN ran a 5x5 depthwise weight gradient, or left another to the reference kernels";
    }
    // Through conv_cpu.h, as the ops call it: oneDNN where it ran, the reference kernel elsewhere.
    conv_fwd<float>(g, in.x.data(), in.w.data(), bias, y.data());
    conv_dgrad<float>(g, in.dy.data(), in.w.data(), dx.data());
    conv_wgrad<float>(g, in.dy.data(), in.x.data(), dw.data(), dbias);

    const double bound = conv_test::rounding_bound<float>(p);
    const std::vector<double> x64 = doubles(in.x), w64 = doubles(in.w), dy64 = doubles(in.dy);
    const std::vector<double> b64 = t.bias ? doubles(in.b) : std::vector<double>();
    const conv_test::Result want_y = conv_test::forward(p, x64, w64, b64);
    const conv_test::Result want_dx = conv_test::data_gradient(p, dy64, w64);
    const conv_test::Result want_dw = conv_test::weight_gradient(p, dy64, x64);
    conv_test::expect_within("y", y, want_y, bound);
    conv_test::expect_within("dx", dx, want_dx, bound);
    conv_test::expect_within("dw", dw, want_dw, bound);
    if (t.bias) conv_test::expect_within("db", db, conv_test::bias_gradient(p, dy64), bound);
    for (conv_test::Flaw flaw : conv_test::telling_flaws(p)) {
      SCOPED_TRACE("flaw " + std::to_string(int(flaw)));
      EXPECT_GT(conv_test::distance(conv_test::forward(p, x64, w64, b64, flaw).value, want_y).worst, bound);
      EXPECT_GT(conv_test::distance(conv_test::data_gradient(p, dy64, w64, flaw).value, want_dx).worst, bound);
      EXPECT_GT(conv_test::distance(conv_test::weight_gradient(p, dy64, x64, flaw).value, want_dw).worst, bound);
    }
  }
}

// Grouped and depthwise problems are cut into pieces as any other (conv_onednn_cpu.h).
TEST(ConvOnednn, SameBytesWhateverTheThreadCountOnAnyWindow) {
  if (!onednn_built()) GTEST_SKIP() << "this build has no oneDNN (scripts/setup.sh fetches it)";
  const KernelsFor onednn(CpuKernels::OneDnn);
  const int saved_threads = threads();
  for (const WindowCase& t : {kWindowCases[1], kWindowCases[4], kWindowCases[19]}) {
    const WindowProblem& p = t.p;
    SCOPED_TRACE(conv_test::label(p));
    const ConvGeom g = geom_of(p);
    const Inputs in = inputs(p, 13);
    std::vector<std::vector<float>> runs;
    for (int n : {1, 3, 8}) {
      set_threads(n);
      std::vector<float> y(in.dy.size()), dx(in.x.size()), dw(in.w.size()), db(size_t(p.k));
      conv_fwd<float>(g, in.x.data(), in.w.data(), t.bias ? in.b.data() : nullptr, y.data());
      conv_dgrad<float>(g, in.dy.data(), in.w.data(), dx.data());
      conv_wgrad<float>(g, in.dy.data(), in.x.data(), dw.data(), t.bias ? db.data() : nullptr);
      y.insert(y.end(), dx.begin(), dx.end());
      y.insert(y.end(), dw.begin(), dw.end());
      y.insert(y.end(), db.begin(), db.end());
      runs.push_back(std::move(y));
    }
    set_threads(saved_threads);
    for (size_t i = 1; i < runs.size(); ++i)
      EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[i].data(), runs[0].size() * sizeof(float))) << "run " << i;
  }
}

TEST(ConvOnednn, TheReferenceKernelsRunWhenChosen) {
  const KernelsFor reference(CpuKernels::Reference);
  const ConvShape s = shape_of(kCases[1]);
  const ConvGeom g = geom_of(s);
  const Inputs in = inputs(s, 7);
  std::vector<float> y(in.dy.size());
  EXPECT_FALSE(onednn_conv_fwd(g, in.x.data(), in.w.data(), nullptr, y.data()));
  EXPECT_FALSE(onednn_conv_dgrad(g, in.dy.data(), in.w.data(), y.data()));
  EXPECT_FALSE(onednn_conv_wgrad(g, in.dy.data(), in.x.data(), y.data(), nullptr));
}

TEST(ConvOnednn, AskingForItWithoutItNamesTheFix) {
  if (onednn_built()) GTEST_SKIP() << "this build has oneDNN";
  try {
    set_cpu_kernels(CpuKernels::OneDnn);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scripts/setup.sh"), std::string::npos) << e.what();
  }
}

// bf16 math (--cpu-kernels onednn-bf16): each product of two inputs rounded to bf16 (8
// significant bits, unit roundoff u = 2^-8) is off by at most (2u + u^2) of its size, the fp32 sum
// adds kBound's share, so each result is within (2u + u^2) of its sum of |terms| plus kBound. The
// forward pass must miss fp32's accuracy (worst above 5e-5, where fp32 math stays near 1e-6): the
// products did go through bf16. A transposed filter misses by orders of magnitude more. On a CPU
// without bf16 instructions the choice is refused, naming the fix, before anything runs.
constexpr double kBf16Bound = 2.0 / 256 + 1.0 / 65536 + kBound;

TEST(ConvOnednn, Bf16MathStaysWithinBf16sBoundOrIsRefused) {
  if (!onednn_built()) GTEST_SKIP() << "this build has no oneDNN (scripts/setup.sh fetches it)";
  const KernelsFor bf16(CpuKernels::OneDnnBf16);
  unsigned seed = 21;
  for (const Case& t : {kCases[1], kCases[3], kCases[4], kCases.back()}) {
    const ConvShape s = shape_of(t);
    SCOPED_TRACE(conv_test::label(s));
    const ConvGeom g = geom_of(s);
    const Inputs in = inputs(s, seed++);
    std::vector<float> y(in.dy.size(), NAN), dx(in.x.size(), NAN), dw(in.w.size(), NAN), db(size_t(s.k), NAN);
    try {
      ASSERT_TRUE(onednn_conv_fwd(g, in.x.data(), in.w.data(), nullptr, y.data()));
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("bf16 instructions"), std::string::npos) << what;
      EXPECT_NE(what.find("use --cpu-kernels onednn"), std::string::npos) << what;
      GTEST_SKIP() << "this CPU has no bf16 instructions; the choice was refused: " << what;
    }
    ASSERT_TRUE(onednn_conv_dgrad(g, in.dy.data(), in.w.data(), dx.data()));
    ASSERT_TRUE(onednn_conv_wgrad(g, in.dy.data(), in.x.data(), dw.data(), t.bias ? db.data() : nullptr));

    const double y_worst = expect_all_match(s, in, doubles(y), dx, dw, kBf16Bound);
    EXPECT_GT(y_worst, 5e-5) << "y: as exact as fp32 math; the products did not go through bf16";
  }
}

// The pieces are cut from the problem, never from the thread count (conv_onednn_cpu.h).
TEST(ConvOnednn, SameBytesWhateverTheThreadCount) {
  if (!onednn_built()) GTEST_SKIP() << "this build has no oneDNN (scripts/setup.sh fetches it)";
  const KernelsFor onednn(CpuKernels::OneDnn);
  const int saved_threads = threads();
  for (const Case& t : {kCases[2], kCases.back()}) {  // batch pieces alone; pieces and channel slices
    const ConvShape s = shape_of(t);
    SCOPED_TRACE(conv_test::label(s));
    const ConvGeom g = geom_of(s);
    const Inputs in = inputs(s, 11);
    std::vector<std::vector<float>> runs;
    for (int n : {1, 3, 8}) {
      set_threads(n);
      std::vector<float> y(in.dy.size()), dx(in.x.size()), dw(in.w.size()), db(size_t(s.k));
      ASSERT_TRUE(onednn_conv_fwd(g, in.x.data(), in.w.data(), nullptr, y.data()));
      ASSERT_TRUE(onednn_conv_dgrad(g, in.dy.data(), in.w.data(), dx.data()));
      ASSERT_TRUE(onednn_conv_wgrad(g, in.dy.data(), in.x.data(), dw.data(), t.bias ? db.data() : nullptr));
      y.insert(y.end(), dx.begin(), dx.end());
      y.insert(y.end(), dw.begin(), dw.end());
      y.insert(y.end(), db.begin(), db.end());
      runs.push_back(std::move(y));
    }
    set_threads(saved_threads);
    for (size_t i = 1; i < runs.size(); ++i)
      EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[i].data(), runs[0].size() * sizeof(float))) << "run " << i;
  }
}

// Two 3x3 CBRs (the second of stride 2) and a linear layer on side x side x channels inputs: a
// small program that runs every convolution pass.
Blueprint two_cbrs(const char* name, int side, int channels, int k1, int k2, int classes) {
  Blueprint m(name);
  m.input(side, side, channels);
  m.cbr(k1, 3, 1, 1, "conv1").cbr(k2, 3, 2, 1, "conv2").flatten("flatten").fc(classes, true, "fc");
  return m;
}

// Preparing a program makes every convolution primitive its steps use, so that no step stops to
// JIT-compile one: the first step makes none. It also sizes the CPU backend's workspace for the
// convolutions' scratch (filters in oneDNN's layout, scratchpads, partial gradients), so the step
// takes all of it from there and allocates none of its own.
TEST(ConvOnednn, PrimitivesAndScratchAreMadeWhenTheProgramIsPrepared) {
  if (!onednn_built()) GTEST_SKIP() << "this build has no oneDNN (scripts/setup.sh fetches it)";
  const KernelsFor onednn(CpuKernels::OneDnn);
  // Shapes no other test in this process uses: the primitives are kept process-wide, per problem.
  const Blueprint m = two_cbrs("prepared", 11, 5, 24, 40, 3);
  CompileOptions o;
  o.batch = 6;
  const int64_t before = onednn_primitives_made();
  Executable exe(compile(m, o), 1);
  const int64_t prepared = onednn_primitives_made();
  // conv1 (the first layer: no input gradient) forward and wgrad, conv2 forward, dgrad and wgrad.
  EXPECT_EQ(prepared - before, 5);
  std::mt19937 rng(3);
  const std::vector<float> x = random_floats(size_t(6 * 11 * 11 * 5), rng);
  const std::vector<int32_t> labels = {0, 2, 1, 1, 0, 2};
  exe.write(exe.program().input, x.data(), x.size() * sizeof(float));
  exe.write(exe.program().label, labels.data(), labels.size() * sizeof(int32_t));
  EXPECT_GT(exe.workspace_bytes(), 0u) << "the convolutions asked the backend for no scratch";
  const int64_t fallbacks = onednn_scratch_fallbacks();
  exe.run_step({0.1f, 0, 1});
  EXPECT_EQ(onednn_primitives_made(), prepared) << "the step made primitives of its own";
  EXPECT_EQ(onednn_scratch_fallbacks(), fallbacks) << "a convolution found the op's scratch too small";
}

// bf16 math chosen through the public options (CompileOptions::cpu.kernels = 3): on a CPU without
// bf16 instructions preparing the program is refused, naming the fix; on one with them a step
// trains, and its loss differs from the fp32 program's (the convolutions did round to bf16) by
// no more than bf16's rounding can move it: the products are off by at most 2^-7 of their size,
// which moves the logits of this small network, and so the loss, by well under 5%.
TEST(ConvOnednn, Bf16MathThroughTheProgramsOptions) {
  if (!onednn_built()) GTEST_SKIP() << "this build has no oneDNN (scripts/setup.sh fetches it)";
  const KernelsFor restore(CpuKernels::OneDnn);
  const Blueprint m = two_cbrs("bf16_math", 12, 8, 32, 48, 4);
  std::mt19937 rng(5);
  const std::vector<float> x = random_floats(size_t(8 * 12 * 12 * 8), rng);
  const std::vector<int32_t> labels = {0, 3, 1, 2, 0, 2, 3, 1};
  auto first_loss = [&](int kernels) {
    CompileOptions o;
    o.batch = 8;
    o.cpu.kernels = kernels;
    Executable exe(compile(m, o), 1);
    exe.write(exe.program().input, x.data(), x.size() * sizeof(float));
    exe.write(exe.program().label, labels.data(), labels.size() * sizeof(int32_t));
    exe.run_step({0.1f, 0, 1});
    return exe.read<float>(exe.program().loss)[0];
  };
  const float fp32 = first_loss(1);
  float bf16 = 0;
  try {
    bf16 = first_loss(3);
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bf16 instructions"), std::string::npos) << what;
    EXPECT_NE(what.find("use --cpu-kernels onednn"), std::string::npos) << what;
    GTEST_SKIP() << "this CPU has no bf16 instructions; the choice was refused: " << what;
  }
  EXPECT_NE(bf16, fp32) << "bf16 math gave fp32's loss to the bit: it did not run";
  EXPECT_NEAR(bf16, fp32, 0.05 * fp32);
}

}  // namespace
}  // namespace kiln::cpu

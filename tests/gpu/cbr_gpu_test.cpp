// The fused CBR operator on the GPU against the unfused GPU path (Conv + BN + ReLU ops) and the
// CPU fp32 reference (itself checked against float64 in the CPU suite): forward, backward with
// and without dX (first layer), running statistics, the bit mask and inference, for fp32, fp16
// and bf16 on fresh random inputs; and the checks of GPU-only options.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "cbr_float64_check.h"
#include "kiln/error.h"
#include "ops/conv/tap_fold_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cudnn_graphs.h"
#include "support/cbr_block.h"
#include "support/cpu_test_util.h"
#include "support/gpu_test_util.h"
#include "support/scoped_env.h"

namespace kiln {
namespace {

using namespace kiln::testing;

const BlockShape kShapes[] = {
    {8, 64, 15, 64, 3, 1}, {8, 64, 15, 128, 3, 2}, {4, 128, 9, 256, 1, 1},
    {4, 256, 7, 512, 3, 1}, {4, 512, 7, 64, 1, 2}, {2, 64, 28, 256, 1, 1},
};

struct BlockRun {
  std::unique_ptr<Executable> exe;
  std::map<std::string, std::vector<float>> fwd, bwd;
};

// Runs one training step (forward, backward) and one inference pass; reads what it needs.
// gamma/beta replace the initial 1/0 when given; `cuda` sets the CUDA backend's options.
BlockRun run_block(const BlockShape& s, Device device, Precision precision, bool fuse, bool input_grad,
                   const std::vector<float>& x, const std::vector<float>& dy, const std::vector<float>& gamma = {},
                   const std::vector<float>& beta = {}, const CudaOptions& cuda = {}) {
  BlockRun r;
  r.exe = std::make_unique<Executable>(
      compile(conv_bn_relu_block(s), block_options(s, device, precision, fuse, input_grad, cuda)), 17);
  Executable& e = *r.exe;
  if (!gamma.empty()) write_floats(e, e.id("bn.weight"), gamma);
  if (!beta.empty()) write_floats(e, e.id("bn.bias"), beta);
  write_floats(e, e.program().input, x);
  write_floats(e, e.program().output_grad, dy);
  e.run_forward({0.f, 0, 3});
  const std::string y = fuse ? "conv" : "relu", stats = fuse ? "conv" : "bn";
  r.fwd["y"] = read_floats(e, y);
  r.fwd["mean"] = read_floats(e, stats + ":saved_mean");
  r.fwd["inv_std"] = read_floats(e, stats + ":saved_inv_std");
  r.fwd["running_mean"] = read_floats(e, "bn.running_mean");
  r.fwd["running_var"] = read_floats(e, "bn.running_var");
  if (fuse) {
    const int id = e.id("conv:bitmask");
    std::vector<uint8_t> bits(e.program().tensors[id].bytes());
    e.read(id, bits.data(), bits.size());
    std::vector<float> mask(r.fwd["y"].size());
    for (size_t i = 0; i < mask.size(); ++i) mask[i] = float((bits[i / 8] >> (i % 8)) & 1);
    r.fwd["mask"] = mask;
  } else {
    const int id = e.id("relu:mask");
    std::vector<uint8_t> bytes(e.program().tensors[id].bytes());
    e.read(id, bytes.data(), bytes.size());
    r.fwd["mask"] = std::vector<float>(bytes.begin(), bytes.end());
  }
  r.fwd["w"] = read_floats(e, "conv.weight");
  e.run_backward({0.f, 0, 3});
  for (const char* g : {"conv.weight.grad", "bn.weight.grad", "bn.bias.grad"}) r.bwd[g] = read_floats(e, g);
  if (input_grad) r.bwd["dx"] = read_floats(e, e.program().tensors[e.program().input_grad].name);
  e.run_inference({0.f, 0, 3});
  r.fwd["inference"] = read_floats(e, (fuse ? "conv" : "relu") + std::string(":inf"));
  return r;
}

// expect_close on every tensor of `ref` (but the mask and the weights).
void expect_close(const std::map<std::string, std::vector<float>>& got,
                  const std::map<std::string, std::vector<float>>& ref, double tol, const std::string& what) {
  for (const auto& [name, values] : ref) {
    if (name == "mask" || name == "w") continue;
    ASSERT_TRUE(got.count(name)) << what << ": " << name;
    testing::expect_close(what + ": " + name, got.at(name), values, tol);
  }
}

// Masks may differ only where the pre-activation is within rounding of zero.
void expect_masks_agree(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  size_t differ = 0, ones = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i], ones += a[i] != 0;
  EXPECT_LE(differ, a.size() / 500 + 2) << what << ": " << differ << " of " << a.size() << " mask bits differ";
  EXPECT_GT(ones, a.size() / 5) << what;
  EXPECT_LT(ones, a.size()) << what;
}

class CbrGpu : public ::testing::TestWithParam<Precision> {};

TEST_P(CbrGpu, FusedEqualsUnfusedAndCpuReference) {
  KILN_REQUIRE_GPU();
  const Precision precision = GetParam();
  const DType dtype = activation_dtype(precision);
  for (const BlockShape& s : kShapes) {
    SCOPED_TRACE(s.str());
    std::mt19937 rng(1000 + s.c + s.k + s.hw);
    const int64_t ho = (s.hw + 2 * s.pad() - s.kernel) / s.stride + 1;
    const auto x = random_values<float>(dtype, size_t(s.n) * s.hw * s.hw * s.c, rng);
    const auto dy = random_values<float>(dtype, size_t(s.n) * ho * ho * s.k, rng);
    BlockRun fused = run_block(s, Device::CUDA, precision, true, true, x, dy);
    BlockRun unfused = run_block(s, Device::CUDA, precision, false, true, x, dy);
    BlockRun first = run_block(s, Device::CUDA, precision, true, false, x, dy);
    BlockRun cpu = run_block(s, Device::CPU, Precision::FP32, true, true, x, dy);
    const double tol = tolerance(precision);
    // The backward against a reference: BackwardMatchesFloat64WithItsOwnMask below.
    expect_close(fused.fwd, cpu.fwd, tol, "fused vs cpu (forward)");
    expect_close(unfused.fwd, cpu.fwd, tol, "unfused vs cpu (forward)");
    expect_close(fused.fwd, unfused.fwd, tol, "fused vs unfused (forward)");
    expect_close(fused.bwd, unfused.bwd, tol, "fused vs unfused (backward)");
    // First-layer backward: no dX, and the parameter gradients of the full backward.
    EXPECT_FALSE(first.bwd.count("dx"));
    auto without_dx = fused.bwd;
    without_dx.erase("dx");
    // (cuDNN's fastest wgrad plans may split the reduction, so runs agree to rounding, not bits:
    // up to 1.3e-5 measured.)
    expect_close(first.bwd, without_dx, 1e-4, "first-layer vs full backward");
    EXPECT_EQ(first.exe->program().backward.front().kind, OpKind::CBR_BWD_FIRST);
    // The bit mask, transcoded, against the unfused byte mask and the CPU's.
    expect_masks_agree(fused.fwd["mask"], unfused.fwd["mask"], "bit mask vs byte mask");
    expect_masks_agree(fused.fwd["mask"], cpu.fwd["mask"], "gpu vs cpu mask");
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CbrGpu, ::testing::Values(Precision::FP16, Precision::BF16, Precision::FP32),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

// The backward of the fused and the unfused GPU block against float64 (cbr_float64_check.h): dY
// correlated with the pre-activation so that BN's correction terms are a large part of dX, random
// gamma/beta, every gradient within tolerance() of float64 through the run's own mask, and mask
// bits differing from float64's only within rounding of zero.
TEST_P(CbrGpu, BackwardMatchesFloat64WithItsOwnMask) {
  KILN_REQUIRE_GPU();
  const Precision precision = GetParam();
  const DType dtype = activation_dtype(precision);
  for (const BlockShape& s : kShapes) {
    SCOPED_TRACE(s.str());
    std::mt19937 rng(3000 + s.c + s.k + s.hw);
    const auto x = random_values<float>(dtype, size_t(s.n) * s.hw * s.hw * s.c, rng);
    std::vector<float> gamma = random_values(DType::F32, size_t(s.k), rng, 0.f, 0.3f), beta = gamma;
    for (float& v : gamma) v += 1.f;
    for (float& v : beta) v *= 0.5f;
    // The initial weights depend on the seed alone (run_block checks that each run has them).
    Executable init(compile(conv_bn_relu_block(s), block_options(s, Device::CPU, Precision::FP32, true, true)), 17);
    const Float64Block ref(s, x, read_floats(init, "conv.weight"), gamma, beta, precision);
    const std::vector<float> dy = ref.correlated_dy(rng);
    for (bool fuse : {true, false}) {
      BlockRun run = run_block(s, Device::CUDA, precision, fuse, true, x, dy, gamma, beta);
      ref.expect_backward_matches(run.fwd["mask"], run.bwd, run.fwd["w"], dy, fuse ? "fused" : "unfused");
    }
  }
}

// A fresh input of `s` in the precision's dtype, its float64 block with the initial weights (which
// depend on the seed alone: run_block checks that each run has them) and a dY correlated with the
// pre-activation, so that BN's correction terms are a large part of dX.
std::vector<float> initial_weights(const BlockShape& s) {
  Executable init(compile(conv_bn_relu_block(s), block_options(s, Device::CPU, Precision::FP32, true, true)), 17);
  return read_floats(init, "conv.weight");
}
struct Float64Case {
  std::vector<float> x;
  Float64Block ref;
  std::vector<float> dy;
  Float64Case(const BlockShape& s, Precision precision, std::mt19937& rng)
      : x(random_values<float>(activation_dtype(precision), size_t(s.n) * s.hw * s.hw * s.c, rng)),
        ref(s, x, initial_weights(s), {}, {}, precision),
        dy(ref.correlated_dy(rng)) {}
};

// Whether the process-wide graph cache of backends with `options` holds graph `kind` of `s` at
// batch `n`.
bool has_graph_at_batch(const char* kind, const BlockShape& s, int n, const CudaOptions& options = {}) {
  cuda::CudaBackend backend(0, options);
  for (const cuda::TuneRecord& r : backend.graphs().tune_records())
    if (r.kind == kind && r.problem.n == n && r.problem.c == s.c && r.problem.k == s.k && r.problem.h == s.hw &&
        r.problem.r == s.kernel && r.problem.win.stride_h == s.stride)
      return true;
  return false;
}

// CUDA options that take the statistics of a CBR's convolution in way `mode` (CudaOptions::conv_stats),
// untimed when `tuned` is false (then way 2 keeps cuDNN's graph where one builds).
CudaOptions conv_stats(int mode, bool tuned = true) {
  CudaOptions o;
  o.conv_stats = mode;
  o.tune = tuned;
  return o;
}

// The ways to a convolution's statistics: kiln's sum kernel after the convolution (0) and cuDNN's
// statistics graphs (2, untimed: genstats in fp16, the reductions graph in bf16; fp32 builds
// neither, so both take the sum kernel there) each train the block's step as float64 does, and
// agree in the forward. In bf16 the reductions graph must have been built (on the H200 it builds
// for these shapes). Way 0 gives the same bytes in two steps, in every precision; cuDNN's graphs
// finish their sums with atomics and need not (fp16's genstats differs in the last bits, measured).
TEST_P(CbrGpu, StatisticsWaysMatchFloat64) {
  KILN_REQUIRE_GPU();
  const ScopedEnv unset("KILN_CONV_STATS", "");  // the variable would override the ways compared here
  const ScopedEnv tuned("KILN_CUDNN_TUNE", "");  // and this one the untimed choice
  const Precision precision = GetParam();
  for (const BlockShape& s : kShapes) {
    SCOPED_TRACE(s.str());
    std::mt19937 rng(4000 + s.c + s.k + s.hw);
    const Float64Case c(s, precision, rng);
    const auto &x = c.x, &dy = c.dy;
    BlockRun kernel = run_block(s, Device::CUDA, precision, true, true, x, dy, {}, {}, conv_stats(0));
    BlockRun graph = run_block(s, Device::CUDA, precision, true, true, x, dy, {}, {}, conv_stats(2, false));
    if (precision == Precision::BF16) {
      EXPECT_TRUE(has_graph_at_batch("CONV_FPROP_SUMS", s, s.n, conv_stats(2, false)))
          << "the reductions graph was not built";
    }
    expect_close(graph.fwd, kernel.fwd, tolerance(precision), "cuDNN's statistics graph vs sum kernel (forward)");
    c.ref.expect_backward_matches(kernel.fwd["mask"], kernel.bwd, kernel.fwd["w"], dy, "sum kernel");
    c.ref.expect_backward_matches(graph.fwd["mask"], graph.bwd, graph.fwd["w"], dy, "cuDNN's statistics graph");
    const BlockRun again = run_block(s, Device::CUDA, precision, true, true, x, dy, {}, {}, conv_stats(0));
    EXPECT_EQ(kernel.fwd, again.fwd) << "two steps with the sum kernel differ in the forward";
  }
}

CudaOptions fold_taps(int mode) {
  CudaOptions o;
  o.fold_taps = mode;
  return o;
}

// Whether the graph cache of backends with `options` built a weight-gradient graph of `q`, the
// folded problem of a block: the fold ran (the block's own problem has other channels and taps).
bool built_wgrad_of(const cuda::ConvShape& q, const CudaOptions& options) {
  cuda::CudaBackend backend(0, options);
  for (const cuda::TuneRecord& r : backend.graphs().tune_records())
    if (r.kind == "CONV_WGRAD" && r.problem.n == q.n && r.problem.c == q.c && r.problem.h == q.h &&
        r.problem.w == q.w && r.problem.r == q.r && r.problem.s == q.s && r.problem.k == q.k)
      return true;
  return false;
}

// First layers with few input channels, their filter taps folded into channels (tap_fold_cuda.h;
// CudaOptions::fold_taps 2: wherever a fold applies): ResNet's stem at a small size (7x7 stride 2,
// folded by stride into 16 channels of 4x4 taps), VGG's first layer (3x3 stride 1: its width taps,
// or all nine, into 16 or 32 channels) and a one-channel 5x5 (MNIST's). Each trains the block's
// step as float64 does, as the first layer (no dX: CBR_BWD_FIRST) and with dX (CBR_BWD), its
// forward as the block without folds does, and its weight gradient ran on the folded problem.
TEST_P(CbrGpu, FoldedTapsTrainAsFloat64Does) {
  KILN_REQUIRE_GPU();
  const ScopedEnv unset("KILN_FOLD_TAPS", "");  // the variable would override the modes compared here
  const Precision precision = GetParam();
  const DType dtype = activation_dtype(precision);
  for (const BlockShape& s : {BlockShape{4, 3, 29, 64, 7, 2}, BlockShape{4, 3, 20, 32, 3, 1},
                              BlockShape{4, 1, 16, 16, 5, 1}}) {
    SCOPED_TRACE(s.str());
    const int64_t ho = (s.hw + 2 * s.pad() - s.kernel) / s.stride + 1;
    const cuda::ConvShape shape{s.n, s.hw, s.hw, s.c, s.k, s.kernel, s.kernel, s.stride, s.pad(), ho, ho, dtype};
    const std::vector<cuda::TapFold> folds = cuda::tap_folds(shape);
    ASSERT_FALSE(folds.empty()) << "no fold applies to a first layer of " << s.c << " channels";
    std::mt19937 rng(5000 + s.c + s.k + s.hw);
    const Float64Case c(s, precision, rng);
    const auto &x = c.x, &dy = c.dy;
    const BlockRun plain = run_block(s, Device::CUDA, precision, true, true, x, dy, {}, {}, fold_taps(0));
    for (bool input_grad : {false, true}) {
      BlockRun run = run_block(s, Device::CUDA, precision, true, input_grad, x, dy, {}, {}, fold_taps(2));
      expect_close(run.fwd, plain.fwd, tolerance(precision), "folded taps vs not (forward)");
      c.ref.expect_backward_matches(run.fwd["mask"], run.bwd, run.fwd["w"], dy,
                                    input_grad ? "folded taps, with dX" : "folded taps, first layer");
    }
    // fold_taps 2 prepares every fold that applies and keeps the fastest of them.
    for (cuda::TapFold f : folds)
      EXPECT_TRUE(built_wgrad_of(cuda::folded_shape(shape, f), fold_taps(2)))
          << cuda::tap_fold_name(f) << ": the weight gradient's folded problem was not prepared";
  }
}

// The folds' shapes: ResNet's stem folds by stride only (its width whole would be 42 channels),
// VGG's first layer its width or all its taps, an input of 8 channels not at all; which are lean.
TEST(CbrGpuFolds, FoldedShapesAreTheConvolutionsWithMoreChannels) {
  const cuda::ConvShape stem{256, 224, 224, 3, 64, 7, 7, 2, 3, 112, 112, DType::BF16};
  ASSERT_EQ(cuda::tap_folds(stem), std::vector<cuda::TapFold>{cuda::TapFold::kByStride});
  const cuda::ConvShape q = cuda::folded_shape(stem, cuda::TapFold::kByStride);
  EXPECT_EQ(std::vector<int64_t>({q.h, q.w, q.c, q.r, q.s, q.stride, q.pad, q.ho, q.wo}),
            std::vector<int64_t>({115, 115, 16, 4, 4, 1, 0, 112, 112}));
  const cuda::ConvShape vgg{256, 224, 224, 3, 64, 3, 3, 1, 1, 224, 224, DType::F16};
  ASSERT_EQ(cuda::tap_folds(vgg), (std::vector<cuda::TapFold>{cuda::TapFold::kWidthWhole, cuda::TapFold::kWhole}));
  const cuda::ConvShape wide = cuda::folded_shape(vgg, cuda::TapFold::kWidthWhole);
  EXPECT_EQ(std::vector<int64_t>({wide.h, wide.w, wide.c, wide.r, wide.s}),
            std::vector<int64_t>({226, 224, 16, 3, 1}));
  const cuda::ConvShape whole = cuda::folded_shape(vgg, cuda::TapFold::kWhole);
  EXPECT_EQ(std::vector<int64_t>({whole.h, whole.w, whole.c, whole.r, whole.s}),
            std::vector<int64_t>({224, 224, 32, 1, 1}));
  EXPECT_TRUE(cuda::tap_folds({8, 32, 32, 8, 64, 3, 3, 1, 1, 32, 32, DType::F16}).empty());
  // The default takes the lean folds only: the stem's input grows 1.4x, VGG's 5.3x and 10.7x.
  EXPECT_TRUE(cuda::tap_fold_is_lean(stem, cuda::TapFold::kByStride));
  EXPECT_FALSE(cuda::tap_fold_is_lean(vgg, cuda::TapFold::kWidthWhole));
  EXPECT_FALSE(cuda::tap_fold_is_lean(vgg, cuda::TapFold::kWhole));
}

// CUDA options with `runs` timed runs per plan (a count setting the backend checks).
CudaOptions tune_runs(int runs) {
  CudaOptions o;
  o.tune_runs = runs;
  return o;
}

TEST(CbrGpuErrors, CountSettingsFromTheEnvironmentAreChecked) {
  KILN_REQUIRE_GPU();
  const ScopedEnv bad("KILN_CUDNN_TIMED_RUNS", "two");
  kiln::testing::expect_error([] { cuda::CudaBackend backend(0); }, {"KILN_CUDNN_TIMED_RUNS"});
}

// The options themselves: out of range is an error naming the field; the environment overrides them.
TEST(CbrGpuErrors, CountOptionIsCheckedAndTheEnvironmentOverridesIt) {
  KILN_REQUIRE_GPU();
  const ScopedEnv unset("KILN_CUDNN_TIMED_RUNS", "");
  kiln::testing::expect_error([] { cuda::CudaBackend backend(0, tune_runs(0)); }, {"cuda.tune_runs"});
  EXPECT_EQ(cuda::CudaBackend(0, tune_runs(3)).options().tune_runs, 3);
  const ScopedEnv two("KILN_CUDNN_TIMED_RUNS", "2");
  EXPECT_EQ(cuda::CudaBackend(0, tune_runs(3)).options().tune_runs, 2);
}

// --device cuda:N: an ordinal past the visible GPUs is an error naming the range; the last
// visible one runs a step.
TEST(CbrGpuErrors, DeviceOrdinalIsCheckedAndTheLastVisibleGpuRuns) {
  KILN_REQUIRE_GPU();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  const BlockShape s{2, 16, 8, 16, 3, 1};
  CompileOptions o = block_options(s, Device::CUDA, Precision::FP16, true, false);
  o.device_index = count;
  kiln::testing::expect_error([&] { Executable exe(compile(conv_bn_relu_block(s), o), 1); },
                              {"CUDA device " + std::to_string(count), "cuda:" + std::to_string(count - 1)});
  o.device_index = count - 1;
  Executable exe(compile(conv_bn_relu_block(s), o), 1);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t(s.n) * s.hw * s.hw * s.c);
  for (float& v : x) v = normal(rng);
  write_floats(exe, exe.program().input, x);
  exe.run_forward(StepScalars{0.f, 0, 1});
  const std::vector<float> y = read_floats(exe, "conv");
  ASSERT_EQ(y.size(), size_t(s.n) * s.hw * s.hw * s.k);
  double positive = 0;
  for (float v : y) {
    ASSERT_GE(v, 0.f);  // after ReLU
    positive += v > 0;
  }
  EXPECT_GT(positive, 0.25 * y.size());  // batch-normalized, about half pass the ReLU
}

}  // namespace
}  // namespace kiln

// CudnnGraphs against naive double-precision convolutions (NHWC activations, KRSC filters).
//
// TF32 policy: the graphs here use the default CudnnGraphsOptions (allow_tf32 = false), which drops
// every fp32 engine whose notes say TENSOR_CORE or DOWN_CONVERT_INPUTS. fp32 results must therefore
// match double to 1e-4 relative L2; a TF32 engine slipping through would show up as ~1e-3.
// fp16 results are checked to 5e-3 and bf16 to 2e-2 (inputs are rounded to the io dtype first, so
// the reference sees exactly the values the GPU sees; the rest is output rounding and fp32 sums).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "ops/cbr/cbr_cudnn_graphs_cuda.h"
#include "ops/conv/conv_cudnn_graphs_cuda.h"
#include "runtime/cuda/cudnn_graphs.h"
#include "runtime/cuda/env_settings.h"
#include "support/cpu_test_util.h"
#include "support/gpu_test_util.h"
#include "support/temp_dir.h"

namespace kiln::cuda {
namespace {

using gpu_test::cuda_check;
using gpu_test::DeviceTensor;
using testing::expect_error;
using testing::rel_l2;

CudnnGraphsOptions untuned() {
  CudnnGraphsOptions o;
  o.tune = false;  // the heuristics' first plan: keeps the suite fast; tuning has its own test
  return o;
}

// Shared by the tests (handle creation is slow). Destroyed by an exit handler registered after its
// cudnnCreate, so before cuDNN's own teardown (as the backend's caches, cudnn_graph_caches.cpp): a handle
// left to the end keeps its device memory, which compute-sanitizer's leak check reports.
CudnnGraphs& graphs() {
  static CudnnGraphs* g = [] {
    auto* made = new CudnnGraphs(untuned());
    std::atexit([] { delete g; });
    return made;
  }();
  return *g;
}

// Host values rounded to a dtype (what the reference computes with) and their device copy.
struct Input {
  std::vector<double> values;
  DeviceTensor dev;
  Input(DType dtype, std::vector<double> v) : values(testing::rounded(dtype, std::move(v))), dev(dtype, values) {}
  void* ptr() const { return dev.ptr(); }
  float* f32() const { return dev.f32(); }
};

// Uniform in [lo, hi), never within 1e-3 of zero.
std::vector<double> uniform_nonzero(size_t count, double lo, double hi, std::mt19937& rng) {
  std::uniform_real_distribution<double> uni(lo, hi);
  std::vector<double> v(count);
  for (auto& x : v) {
    do x = uni(rng);
    while (std::abs(x) < 1e-3);  // non-zero
  }
  return v;
}

double tolerance(DType dtype) { return dtype == DType::F32 ? 1e-4 : dtype == DType::F16 ? 5e-3 : 2e-2; }

// ---- naive references (double, NHWC / KRSC) ------------------------------------------------------
size_t x_index(const ConvProblem& p, int64_t n, int64_t y, int64_t x, int64_t c) {
  return static_cast<size_t>(((n * p.h + y) * p.w + x) * p.c + c);
}
size_t y_index(const ConvProblem& p, int64_t n, int64_t y, int64_t x, int64_t k) {
  return static_cast<size_t>(((n * p.ho + y) * p.wo + x) * p.k + k);
}
size_t w_index(const ConvProblem& p, int64_t k, int64_t r, int64_t s, int64_t c) {
  return static_cast<size_t>(((k * p.r + r) * p.s + s) * p.c + c);
}

// Calls f(x_idx, w_idx, y_idx) for every multiply-add of the convolution.
template <class F>
void for_each_tap(const ConvProblem& p, F&& f) {
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t oy = 0; oy < p.ho; ++oy)
      for (int64_t ox = 0; ox < p.wo; ++ox)
        for (int64_t k = 0; k < p.k; ++k)
          for (int64_t r = 0; r < p.r; ++r) {
            const int64_t iy = oy * p.win.stride_h - p.win.pad_top + r;  // square windows only
            if (iy < 0 || iy >= p.h) continue;
            for (int64_t s = 0; s < p.s; ++s) {
              const int64_t ix = ox * p.win.stride_w - p.win.pad_left + s;
              if (ix < 0 || ix >= p.w) continue;
              for (int64_t c = 0; c < p.c; ++c)
                f(x_index(p, n, iy, ix, c), w_index(p, k, r, s, c), y_index(p, n, oy, ox, k));
            }
          }
}

std::vector<double> ref_fprop(const ConvProblem& p, const std::vector<double>& x, const std::vector<double>& w) {
  std::vector<double> y(static_cast<size_t>(p.n * p.ho * p.wo * p.k), 0.0);
  for_each_tap(p, [&](size_t xi, size_t wi, size_t yi) { y[yi] += x[xi] * w[wi]; });
  return y;
}
std::vector<double> ref_dgrad(const ConvProblem& p, const std::vector<double>& dy, const std::vector<double>& w) {
  std::vector<double> dx(static_cast<size_t>(p.n * p.h * p.w * p.c), 0.0);
  for_each_tap(p, [&](size_t xi, size_t wi, size_t yi) { dx[xi] += dy[yi] * w[wi]; });
  return dx;
}
std::vector<double> ref_wgrad(const ConvProblem& p, const std::vector<double>& dy, const std::vector<double>& x) {
  std::vector<double> dw(static_cast<size_t>(p.k * p.r * p.s * p.c), 0.0);
  for_each_tap(p, [&](size_t xi, size_t wi, size_t yi) { dw[wi] += dy[yi] * x[xi]; });
  return dw;
}

struct Case {
  int64_t n, h, w, c, k, r, s, stride, pad;
};
// 1x1 and 3x3, stride 1 and 2, pad 0 and 1, C and K in {8, 16, 64}, H = W in {7, 9, 16}.
const std::vector<Case> kCases = {
    {2, 7, 7, 8, 16, 1, 1, 1, 0},   {2, 9, 9, 16, 8, 3, 3, 1, 1},    {3, 16, 16, 8, 64, 3, 3, 2, 1},
    {4, 7, 7, 64, 16, 3, 3, 1, 1},  {2, 16, 16, 64, 64, 1, 1, 2, 0}, {2, 9, 9, 16, 16, 3, 3, 2, 0},
};
// Fused graphs: channel counts closer to real networks.
const std::vector<Case> kFusedCases = {
    {2, 9, 9, 16, 16, 3, 3, 1, 1},
    {4, 7, 7, 64, 64, 3, 3, 1, 1},
    {2, 16, 16, 64, 64, 1, 1, 1, 0},
};

ConvProblem problem_of(const Case& c, DType io) {
  return make_conv_problem(c.n, c.h, c.w, c.c, c.k, c.r, c.s, c.stride, c.pad, io);
}

// Runs `graph` on `p` with the given pointers and a fresh workspace, then synchronizes.
void run_graph(CudnnGraphs& g, const CudnnGraphDef& graph, const ConvProblem& p, const Pointers& ptrs) {
  const size_t ws = g.prepare(graph, p);
  void* workspace = nullptr;
  if (ws > 0) cuda_check(cudaMalloc(&workspace, ws), "cudaMalloc workspace");
  g.run(graph, p, ptrs, workspace, nullptr, "cudnn_graphs_gpu_test");
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (workspace) cudaFree(workspace);
}

// Random inputs of a convolution in its io dtype.
struct ConvData {
  Input x, w, dy;
};

ConvData make_inputs(const ConvProblem& p, std::mt19937& rng) {
  return {Input(p.io, uniform_nonzero(static_cast<size_t>(p.n * p.h * p.w * p.c), -1, 1, rng)),
          Input(p.io, uniform_nonzero(static_cast<size_t>(p.k * p.r * p.s * p.c), -1, 1, rng)),
          Input(p.io, uniform_nonzero(static_cast<size_t>(p.n * p.ho * p.wo * p.k), -1, 1, rng))};
}

void check_fprop(CudnnGraphs& g, const ConvProblem& p, std::mt19937& rng) {
  SCOPED_TRACE(conv_problem_str(p));
  const ConvData d = make_inputs(p, rng);
  const DeviceTensor y = DeviceTensor::poisoned(p.io, static_cast<size_t>(p.n * p.ho * p.wo * p.k));
  Pointers ptrs;
  ptrs.x = d.x.ptr(), ptrs.w = d.w.ptr(), ptrs.y = y.ptr();
  run_graph(g, kConvFpropGraph, p, ptrs);
  EXPECT_LE(rel_l2(y.get(), ref_fprop(p, d.x.values, d.w.values)), tolerance(p.io));
}

void check_dgrad(CudnnGraphs& g, const ConvProblem& p, std::mt19937& rng) {
  SCOPED_TRACE(conv_problem_str(p));
  const ConvData d = make_inputs(p, rng);
  const DeviceTensor dx = DeviceTensor::poisoned(p.io, static_cast<size_t>(p.n * p.h * p.w * p.c));
  Pointers ptrs;
  ptrs.dy = d.dy.ptr(), ptrs.w = d.w.ptr(), ptrs.dx = dx.ptr();
  run_graph(g, kConvDgradGraph, p, ptrs);
  EXPECT_LE(rel_l2(dx.get(), ref_dgrad(p, d.dy.values, d.w.values)), tolerance(p.io));
}

void check_wgrad(CudnnGraphs& g, const ConvProblem& p, std::mt19937& rng) {
  SCOPED_TRACE(conv_problem_str(p));
  const ConvData d = make_inputs(p, rng);
  const DeviceTensor dw = DeviceTensor::poisoned(p.io, static_cast<size_t>(p.k * p.r * p.s * p.c));
  Pointers ptrs;
  ptrs.dy = d.dy.ptr(), ptrs.x = d.x.ptr(), ptrs.dw = dw.ptr();
  run_graph(g, kConvWgradGraph, p, ptrs);
  EXPECT_LE(rel_l2(dw.get(), ref_wgrad(p, d.dy.values, d.x.values)), tolerance(p.io));
}

TEST(CudnnGraphsGpu, FpropMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(1);
  for (DType io : {DType::F32, DType::F16, DType::BF16})
    for (const Case& c : kCases) check_fprop(graphs(), problem_of(c, io), rng);
}

TEST(CudnnGraphsGpu, DgradMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(2);
  for (DType io : {DType::F32, DType::F16})
    for (const Case& c : kCases) check_dgrad(graphs(), problem_of(c, io), rng);
}

TEST(CudnnGraphsGpu, WgradMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(3);
  for (DType io : {DType::F32, DType::F16})
    for (const Case& c : kCases) check_wgrad(graphs(), problem_of(c, io), rng);
}

// Fused graphs may be unsupported (then callers fall back to CONV_FPROP + own kernels). Each check
// runs per dtype and states what it compared: in fp16 the H200 builds every case (its baseline, 
// docs/cudnn-support.md), so each must run; in fp32 (no TF32 allowed) cuDNN may offer no plan
// at all, and a check that compared nothing is reported as skipped with the reason, never as passed.
class CudnnFusedGraphs : public ::testing::TestWithParam<DType> {
 protected:
  // Runs `check` on every fused case `graph` supports; then fails or skips if some or all were not.
  template <class Check>
  void for_supported_cases(const CudnnGraphDef& graph, Check check) {
    const DType io = GetParam();
    size_t ran = 0;
    for (const Case& c : kFusedCases) {
      const ConvProblem p = problem_of(c, io);
      SCOPED_TRACE(conv_problem_str(p));
      if (!graphs().supported(graph, p)) {
        std::printf("[ note ] %s unsupported for %s\n", graph.name, conv_problem_str(p).c_str());
        continue;
      }
      ++ran;
      check(p);
    }
    if (io == DType::F16) {
      EXPECT_EQ(ran, kFusedCases.size()) << graph.name << " built for " << ran << " of " << kFusedCases.size()
                                         << " fp16 cases";
    } else if (ran == 0) {
      GTEST_SKIP() << graph.name << " builds for none of the " << kFusedCases.size() << " " << dtype_name(io)
                   << " cases on this GPU: nothing compared";
    }
  }
};

TEST_P(CudnnFusedGraphs, FpropGenstatsMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(4);
  const DType io = GetParam();
  for_supported_cases(kConvFpropGenstatsGraph, [&](const ConvProblem& p) {
    const ConvData d = make_inputs(p, rng);
    const DeviceTensor y = DeviceTensor::poisoned(io, static_cast<size_t>(p.n * p.ho * p.wo * p.k));
    // Pre-filled with a large value: the sums must be overwritten, not accumulated into.
    const DeviceTensor sum(DType::F32, std::vector<double>(static_cast<size_t>(p.k), 1e4)),
        sq_sum(DType::F32, std::vector<double>(static_cast<size_t>(p.k), 1e4));
    Pointers ptrs;
    ptrs.x = d.x.ptr(), ptrs.w = d.w.ptr(), ptrs.y = y.ptr();
    ptrs.sum = sum.f32(), ptrs.sq_sum = sq_sum.f32();
    run_graph(graphs(), kConvFpropGenstatsGraph, p, ptrs);
    const auto ref = ref_fprop(p, d.x.values, d.w.values);
    std::vector<double> ref_sum(static_cast<size_t>(p.k), 0.0), ref_sq(static_cast<size_t>(p.k), 0.0);
    for (size_t i = 0; i < ref.size(); ++i) {
      ref_sum[i % p.k] += ref[i];
      ref_sq[i % p.k] += ref[i] * ref[i];
    }
    EXPECT_LE(rel_l2(y.get(), ref), tolerance(io));
    EXPECT_LE(rel_l2(sum.get(), ref_sum), tolerance(io)) << "per-channel sum";
    EXPECT_LE(rel_l2(sq_sum.get(), ref_sq), tolerance(io)) << "per-channel sum of squares";
  });
}

TEST_P(CudnnFusedGraphs, ScaleShiftReluMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(5);
  const DType io = GetParam();
  for_supported_cases(kConvScaleShiftReluGraph, [&](const ConvProblem& p) {
    const ConvData d = make_inputs(p, rng);
    const Input scale(DType::F32, uniform_nonzero(static_cast<size_t>(p.k), 0.5, 1.5, rng));
    const Input shift(DType::F32, uniform_nonzero(static_cast<size_t>(p.k), -0.5, 0.5, rng));
    const DeviceTensor y = DeviceTensor::poisoned(io, static_cast<size_t>(p.n * p.ho * p.wo * p.k));
    Pointers ptrs;
    ptrs.x = d.x.ptr(), ptrs.w = d.w.ptr(), ptrs.y = y.ptr();
    ptrs.scale = scale.f32(), ptrs.shift = shift.f32();
    run_graph(graphs(), kConvScaleShiftReluGraph, p, ptrs);
    auto ref = ref_fprop(p, d.x.values, d.w.values);
    for (size_t i = 0; i < ref.size(); ++i)
      ref[i] = std::max(0.0, ref[i] * scale.values[i % p.k] + shift.values[i % p.k]);
    EXPECT_LE(rel_l2(y.get(), ref), tolerance(io));
  });
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudnnFusedGraphs, ::testing::Values(DType::F16, DType::F32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Channel by channel, |a - b| <= bound[c]; on failure names the first channel outside it.
void expect_within(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& bound,
                   const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t c = 0; c < a.size(); ++c)
    if (std::abs(a[c] - b[c]) > bound[c]) {
      ADD_FAILURE() << what << ": channel " << c << ": " << a[c] << " against " << b[c] << ", bound " << bound[c];
      return;
    }
}

// The reductions graph (CONV_FPROP_SUMS, what CBR and conv + BN may take where genstats does not
// build): the output and both per-channel sums against float64 in every dtype it builds for, and
// the sums overwritten rather than accumulated into. Two runs give the same output bytes, but
// their sums may differ: the engine finishes them with atomics, in no fixed order (measured on the
// H200: most channels differ in the last bits), which is why kiln takes it only when asked
// (CudaOptions::conv_stats 2). Two orders of adding the same m fp32 terms differ by at most
// 2·(m−1)·2⁻²⁴·Σ|terms| per channel; a run that added to the previous sums would miss that by
// orders of magnitude. One case has 6,272 rows, so that the sums cross many tiles. It must build
// in bf16: that is its use.
TEST(CudnnGraphsGpu, FpropSumsMatchFloat64WithinSummationOrder) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(6);
  std::vector<Case> cases = kFusedCases;
  cases.push_back({8, 28, 28, 64, 128, 3, 3, 1, 1});
  size_t built_bf16 = 0;
  for (DType io : {DType::BF16, DType::F16, DType::F32}) {
    for (const Case& c : cases) {
      const ConvProblem p = problem_of(c, io);
      SCOPED_TRACE(conv_problem_str(p));
      if (!graphs().supported(kConvFpropSumsGraph, p)) {
        std::printf("[ note ] %s unsupported for %s\n", kConvFpropSumsGraph.name, conv_problem_str(p).c_str());
        continue;
      }
      built_bf16 += io == DType::BF16;
      const ConvData d = make_inputs(p, rng);
      const size_t out = static_cast<size_t>(p.n * p.ho * p.wo * p.k), k = static_cast<size_t>(p.k);
      const DeviceTensor y = DeviceTensor::poisoned(io, out), y2 = DeviceTensor::poisoned(io, out);
      const DeviceTensor sum(DType::F32, std::vector<double>(k, 1e4)), sq_sum(DType::F32, std::vector<double>(k, 1e4));
      const DeviceTensor sum2(DType::F32, std::vector<double>(k, -1e4)),
          sq_sum2(DType::F32, std::vector<double>(k, -1e4));
      Pointers ptrs;
      ptrs.x = d.x.ptr(), ptrs.w = d.w.ptr(), ptrs.y = y.ptr(), ptrs.sum = sum.f32(), ptrs.sq_sum = sq_sum.f32();
      run_graph(graphs(), kConvFpropSumsGraph, p, ptrs);
      ptrs.y = y2.ptr(), ptrs.sum = sum2.f32(), ptrs.sq_sum = sq_sum2.f32();
      run_graph(graphs(), kConvFpropSumsGraph, p, ptrs);
      const auto ref = ref_fprop(p, d.x.values, d.w.values);
      std::vector<double> ref_sum(k, 0.0), ref_sq(k, 0.0), abs_sum(k, 0.0);
      for (size_t i = 0; i < ref.size(); ++i) {
        ref_sum[i % k] += ref[i];
        ref_sq[i % k] += ref[i] * ref[i];
        abs_sum[i % k] += std::abs(ref[i]);
      }
      EXPECT_LE(rel_l2(y.get(), ref), tolerance(io));
      EXPECT_LE(rel_l2(sum.get(), ref_sum), tolerance(io)) << "per-channel sum";
      EXPECT_LE(rel_l2(sq_sum.get(), ref_sq), tolerance(io)) << "per-channel sum of squares";
      EXPECT_EQ(y.get(), y2.get()) << "the output differs between two runs";
      const double order = 2.0 * double(out / k - 1) * std::ldexp(1.0, -24);
      std::vector<double> sum_bound(k), sq_bound(k);
      for (size_t c = 0; c < k; ++c) sum_bound[c] = order * abs_sum[c], sq_bound[c] = order * ref_sq[c];
      expect_within(sum2.get(), sum.get(), sum_bound, "the second run's sums");
      expect_within(sq_sum2.get(), sq_sum.get(), sq_bound, "the second run's sums of squares");
    }
  }
  EXPECT_GT(built_bf16, 0u) << kConvFpropSumsGraph.name << " built for no bf16 case";
}

// Tuning as a backend's graphs get it: CudaOptions' defaults with the KILN_* overrides (CudnnGraphs
// reads no environment), so KILN_CUDNN_TUNE=0 skips these tests and KILN_CUDNN_TUNE_PLANS limits
// the plans timed (scripts/gpu_check.sh). No plan cache file: every graph here is tuned.
CudnnGraphsOptions tuned_as_in_a_backend() {
  CudnnGraphsOptions o = cudnn_graphs_options(with_env_overrides(CudaOptions{}));
  o.plan_cache.clear();
  return o;
}

// The autotuning path: plans built and timed; the kept one must still be correct.
TEST(CudnnGraphsGpu, TunedPlansMatchCpuAndAreRecorded) {
  KILN_REQUIRE_GPU();
  CudnnGraphs tuned(tuned_as_in_a_backend());
  if (!tuned.options().tune) GTEST_SKIP() << "KILN_CUDNN_TUNE=0 in the environment";
  std::mt19937 rng(6);
  const Case c{4, 16, 16, 64, 64, 3, 3, 1, 1};
  check_fprop(tuned, problem_of(c, DType::F16), rng);
  check_dgrad(tuned, problem_of(c, DType::F16), rng);
  check_wgrad(tuned, problem_of(c, DType::F32), rng);
  const auto records = tuned.tune_records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].kind, "CONV_FPROP");
  EXPECT_EQ(records[1].kind, "CONV_DGRAD");
  EXPECT_EQ(records[2].kind, "CONV_WGRAD");
  for (const auto& r : records) {
    SCOPED_TRACE(r.kind);
    EXPECT_GE(r.plans_tried, 1);
    EXPECT_GT(r.best_plan_ms, 0.0);
    EXPECT_LE(r.best_plan_ms, r.first_plan_ms);
    EXPECT_FALSE(r.plan_name.empty());
    std::printf("[ tune ] %s %s: %d of %d plans timed, first %.4f ms, best %.4f ms (%s), workspace %zu\n",
                r.kind.c_str(), conv_problem_str(r.problem).c_str(), r.plans_tried, r.plans_offered, r.first_plan_ms,
                r.best_plan_ms, r.plan_name.c_str(), r.workspace);
  }
}

// The plan cache file: a second handle (as in a later process) rebuilds the tuned plan without
// tuning, and it computes the right convolution; an entry that no longer builds is re-tuned.
TEST(CudnnGraphsGpu, PlanCacheFileReplaysTunedPlans) {
  KILN_REQUIRE_GPU();
  const kiln::testing::TempDir dir;
  const std::string path = dir.file("plans.json");
  CudnnGraphsOptions o = tuned_as_in_a_backend();
  o.max_plans_tuned = 4, o.plan_cache = path;
  const ConvProblem p = make_conv_problem(3, 13, 13, 24, 40, 3, 3, 1, 1, DType::F16);  // used nowhere else
  std::mt19937 rng(61);
  std::string tuned_plan;
  {
    CudnnGraphs first(o);
    if (!first.options().tune) GTEST_SKIP() << "KILN_CUDNN_TUNE=0 in the environment";
    check_fprop(first, p, rng);
    const auto r = first.tune_records().at(0);
    EXPECT_FALSE(r.from_cache);
    EXPECT_GE(r.plans_tried, 1);
    tuned_plan = r.plan_name;
  }
  ASSERT_TRUE(std::filesystem::exists(path));
  {
    CudnnGraphs second(o);
    check_fprop(second, p, rng);
    const auto r = second.tune_records().at(0);
    EXPECT_TRUE(r.from_cache);
    EXPECT_EQ(r.plans_tried, 0);
    EXPECT_EQ(r.plan_name, tuned_plan);
  }
  {
    // A plan no cuDNN offers: the entry is dropped and the graph tuned again.
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find(tuned_plan);
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, tuned_plan.size(), "eng987654_k2=1");
    std::ofstream(path) << text;
    CudnnGraphs third(o);
    check_fprop(third, p, rng);
    const auto r = third.tune_records().at(0);
    EXPECT_FALSE(r.from_cache);
    EXPECT_GE(r.plans_tried, 1);
  }
}

TEST(CudnnGraphsGpu, SecondPrepareHitsTheCacheAndRunsAreBitwiseRepeatable) {
  KILN_REQUIRE_GPU();
  const ConvProblem p = make_conv_problem(2, 11, 11, 16, 32, 3, 3, 1, 1, DType::F16);  // used nowhere else
  const size_t before = graphs().graphs_built();
  const size_t ws1 = graphs().prepare(kConvFpropGraph, p);
  EXPECT_EQ(graphs().graphs_built(), before + 1);
  const size_t ws2 = graphs().prepare(kConvFpropGraph, p);
  EXPECT_EQ(graphs().graphs_built(), before + 1) << "second prepare rebuilt the graph";
  EXPECT_EQ(ws1, ws2);
  EXPECT_TRUE(graphs().supported(kConvFpropGraph, p));
  EXPECT_EQ(graphs().graphs_built(), before + 1);

  std::mt19937 rng(7);
  const ConvData d = make_inputs(p, rng);
  const DeviceTensor y1 = DeviceTensor::poisoned(p.io, static_cast<size_t>(p.n * p.ho * p.wo * p.k)),
                     y2 = DeviceTensor::poisoned(p.io, static_cast<size_t>(p.n * p.ho * p.wo * p.k));
  Pointers ptrs;
  ptrs.x = d.x.ptr(), ptrs.w = d.w.ptr(), ptrs.y = y1.ptr();
  run_graph(graphs(), kConvFpropGraph, p, ptrs);
  ptrs.y = y2.ptr();
  run_graph(graphs(), kConvFpropGraph, p, ptrs);
  EXPECT_EQ(y1.get(), y2.get());
  EXPECT_EQ(graphs().graphs_built(), before + 1);
}

// run() must work under CUDA Graph capture (the engine captures whole training steps): prepare
// outside, capture the run on a side stream in the strictest (global) mode, replay twice.
TEST(CudnnGraphsGpu, RunIsCapturableInACudaGraph) {
  KILN_REQUIRE_GPU();
  const ConvProblem p = make_conv_problem(4, 9, 9, 16, 32, 3, 3, 1, 1, DType::F16);
  const CudnnGraphDef& cudnn_graph =
      graphs().supported(kConvFpropGenstatsGraph, p) ? kConvFpropGenstatsGraph : kConvFpropGraph;
  const size_t ws = graphs().prepare(cudnn_graph, p);
  std::mt19937 rng(8);
  const ConvData d = make_inputs(p, rng);
  const DeviceTensor y = DeviceTensor::poisoned(p.io, static_cast<size_t>(p.n * p.ho * p.wo * p.k)),
                     sum = DeviceTensor::poisoned(DType::F32, static_cast<size_t>(p.k)),
                     sq_sum = DeviceTensor::poisoned(DType::F32, static_cast<size_t>(p.k));
  void* workspace = nullptr;
  if (ws > 0) cuda_check(cudaMalloc(&workspace, ws), "cudaMalloc workspace");
  Pointers ptrs;
  ptrs.x = d.x.ptr(), ptrs.w = d.w.ptr(), ptrs.y = y.ptr();
  ptrs.sum = sum.f32(), ptrs.sq_sum = sq_sum.f32();

  cudaStream_t stream = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  try {
    graphs().run(cudnn_graph, p, ptrs, workspace, stream, "captured run");
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
  cuda_check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cuda_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int replay = 0; replay < 2; ++replay) cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

  const auto ref = ref_fprop(p, d.x.values, d.w.values);
  EXPECT_LE(rel_l2(y.get(), ref), tolerance(p.io));
  if (&cudnn_graph == &kConvFpropGenstatsGraph) {
    std::vector<double> ref_sum(static_cast<size_t>(p.k), 0.0);
    for (size_t i = 0; i < ref.size(); ++i) ref_sum[i % p.k] += ref[i];
    EXPECT_LE(rel_l2(sum.get(), ref_sum), tolerance(p.io)) << "sum after two replays";
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  if (workspace) cudaFree(workspace);
}

TEST(CudnnGraphsGpu, ImpossibleProblemsThrowNamingTheKind) {
  KILN_REQUIRE_GPU();
  ConvProblem zero_k = make_conv_problem(2, 8, 8, 16, 0, 3, 3, 1, 1, DType::F16);
  expect_error([&] { graphs().prepare(kConvFpropGraph, zero_k); }, {"CONV_FPROP"});
  EXPECT_FALSE(graphs().supported(kConvFpropGraph, zero_k));

  ConvProblem int_io = make_conv_problem(2, 8, 8, 16, 16, 3, 3, 1, 1, DType::I32);
  expect_error([&] { graphs().prepare(kConvDgradGraph, int_io); }, {"CONV_DGRAD"});
  expect_error([&] { graphs().prepare(kConvDgradGraph, int_io); }, {"I32"});

  ConvProblem wrong_out = make_conv_problem(2, 8, 8, 16, 16, 3, 3, 1, 1, DType::F16);
  wrong_out.ho = 5;
  expect_error([&] { graphs().prepare(kConvWgradGraph, wrong_out); }, {"CONV_WGRAD"});

  ConvProblem fine = make_conv_problem(2, 8, 8, 16, 16, 3, 3, 1, 1, DType::F16);
  Pointers none;
  expect_error(
      [&] { graphs().run(kConvScaleShiftReluGraph, fine, none, nullptr, nullptr, "layer 'conv1'"); },
      {"CONV_SCALE_SHIFT_RELU"});  // never prepared
  graphs().prepare(kConvFpropGraph, fine);
  expect_error([&] { graphs().run(kConvFpropGraph, fine, none, nullptr, nullptr, "layer 'conv1'"); },
               {"layer 'conv1'"});
}

// Graph names key the plan cache file: a second definition under a name already built would
// replay the first one's plans, so the cache refuses it.
TEST(CudnnGraphsGpu, TwoDefinitionsOfOneNameAreRefused) {
  KILN_REQUIRE_GPU();
  static const CudnnGraphDef impostor{"CONV_FPROP", [](const ConvProblem&, cudnn_frontend::graph::Graph&) {}};
  const ConvProblem p = make_conv_problem(2, 8, 8, 16, 16, 3, 3, 1, 1, DType::F16);
  graphs().prepare(kConvFpropGraph, p);
  expect_error([&] { graphs().prepare(impostor, p); }, {"CONV_FPROP", "already has the name"});
  EXPECT_FALSE(graphs().supported(impostor, p));
}

}  // namespace
}  // namespace kiln::cuda
